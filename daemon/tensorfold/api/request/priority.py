"""Which chat requests are background work (SPEC.md: priority).

`priority` in the body always wins: "foreground" or "background" as sent.
Without it, a chat request is background when it is a session-title request:
a chat front end asking the model to name the conversation (Open WebUI,
LibreChat, LobeChat, Chatbox, big-AGI, NextChat, TypingMind, Cherry Studio,
Zed, opencode and the like do this after a chat's first turns). Everything
else is foreground, raw /v1/completions prompts included.

The rule, applied to the conversation as the template gets it (leading
system and developer messages merged into one system message):

1. Only two places are read: the leading system message and the LAST user
   message. A title request from a front end puts its instruction in one of
   them; a title asked for earlier in a normal conversation does not make the
   later turns background. Of a long message only the first and the last
   4,000 characters are read (the instruction sits at an end; whatever the
   front end pastes in between is the chat being named).
2. That message must ASK FOR A TITLE OF THE CONVERSATION, one of:
   - "title" tied to the conversation: "a title for this conversation",
     "a title summarizing the chat history", "a title for the above chat",
     "title of our discussion" (the object is this/the/our/above/following/
     given/previous/current conversation, chat, chat history, discussion,
     thread, dialogue, exchange or session), or the title of <chat_history>
     (Open WebUI's marker);
   - the conversation turned into a title: "summarize the (above)
     conversation into/as/in a title";
   - the conversation named: "give this conversation a name", "name this
     chat" (the conversation word ends the phrase: "name the session
     variable" is not one);
   - a producing verb (generate, create, write, give, provide, suggest,
     produce, output, return, extract, make, come up with) shortly before
     "chat/conversation/thread/session title": "extract a concise chat
     title", "output only a thread title";
   - a title-generator role: "You are a title generator", "you are a
     conversation titles assistant";
   - Chinese: 对话/会话/聊天 with 标题 ("将用户的会话总结为 10 个字以内的标题").
3. The same message must ALSO KEEP THE ANSWER TO A BARE TITLE, one of:
   a word or character limit ("3-5 word", "5-word-or-less", "four to five
   word", "10 words or fewer", "within 10 characters", "10 characters max",
   "10 个字以内"), an only-the-title demand ("respond only with the title",
   "title only", "just the title", "only give the name", "nothing else",
   "no other text", "without any lead-in/preamble/explanation/additional
   text"), or a JSON title answer ({"title": ...}).

Steps 2 and 3 keep people's own questions foreground: "What is a good
title for my essay about whales?" names no conversation and "How do I change
the chat title in Open WebUI?" asks for no title (step 2); "Give me a title
for this conversation between two robots in my play" asks for a title of a
conversation but sets no bare-answer limit (step 3). Open WebUI's other
<chat_history> tasks (search queries, tags, follow-ups) ask for no title and
stay foreground. A person typing "Name this chat
in 3 words, nothing else" does get background priority: that request is a
session title in all but origin, and background only means it waits behind
foreground work (its reply is the same).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ...engine.types import Priority

__all__ = ["is_title_request", "is_title_prompt", "request_priority"]

# How much of each end of a message is read.
WINDOW = 4000

_CONVERSATION = (r"(?:conversations?|chat(?:[ _-]?history)?|chats|discussion|thread|dialog(?:ue)?|"
                 r"exchange|session|messages)")
_DETERMINER = r"(?:this|the|our|above|following|given|previous|preceding|current|entire|whole|that)"
_GAP = r"[^.\n]{0,40}?"            # a few words, within one sentence
_PRODUCE = (r"(?:generate|create|write|give|provide|suggest|produce|output|return|extract|make|"
            r"come\s+up\s+with|craft|compose|propose)")

_TITLE_TASK = re.compile("|".join((
    # a title for / summarizing / of this conversation (or of <chat_history>)
    rf"\btitles?\b{_GAP}\b(?:for|of|to|summari[sz]ing|that\s+summari[sz]es|describing|capturing|"
    rf"representing|based\s+on)\s+(?:{_DETERMINER}\s+(?:[\w'-]+\s+){{0,2}}?{_CONVERSATION}\b|<chat_history>)",
    # summarize the conversation into a title
    rf"\bsummari[sz]e\s+(?:[\w'-]+\s+){{0,3}}?{_CONVERSATION}\b{_GAP}\b(?:into|as|in|with)\b{_GAP}\btitle\b",
    # give this conversation a name / name this chat
    rf"\bgive\s+{_DETERMINER}\s+{_CONVERSATION}\s+an?\s+(?:[\w-]+\s+){{0,2}}?(?:name|title)\b",
    rf"\bname\s+{_DETERMINER}\s+{_CONVERSATION}(?=[ \t]*(?:[.,:;!?\n]|$)|\s+(?:in|with|using|based|from)\b)",
    # produce a (concise) chat title
    rf"\b{_PRODUCE}\b{_GAP}\b(?:chat|conversation|thread|session)[ -]titles?\b",
    # a title-generator role
    r"\byou\s+are\s+(?:an?\s+)?[^.\n]{0,40}?\btitles?\s+(?:generator|assistant|writer|maker)\b",
    # Chinese: conversation + title
    r"(?:对话|会话|聊天)[^。\n]{0,40}?标题",
)), re.IGNORECASE)

_NUMBER = r"(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|twelve|fifteen|twenty|a\s+few|few)"
_TERSE = re.compile("|".join((
    # word or character limits
    rf"\b{_NUMBER}(?:\s*(?:-|to|or)\s*{_NUMBER})?[\s-]*(?:words?|characters?|chars?)\b",
    r"\b(?:words?|characters?|chars?)\s+(?:or\s+)?(?:less|fewer|max(?:imum)?)\b",
    r"\d+\s*个?(?:字|词|汉字)",
    # only the title
    r"\bonly\s+(?:with\s+|give\s+|provide\s+|output\s+|return\s+|respond\s+with\s+|reply\s+with\s+)?"
    r"(?:the|a|an|your)?\s*(?:[\w-]+\s+){0,3}?(?:titles?|name)\b",
    r"\b(?:title|name)\s+only\b",
    r"\bjust\s+(?:provide\s+|give\s+|output\s+|return\s+)?(?:the|a)\s+(?:[\w-]+\s+){0,2}?(?:title|name)\b",
    r"\bnothing\s+else\b",
    r"\bno\s+other\s+(?:text|words|content|output)\b",
    r"\bwithout\s+(?:any\s+)?(?:[\w-]+[\s,]+){0,3}?"
    r"(?:lead-?in|preamble|prefix|explanations?|additional\s+text|extra\s+text|commentary)\b",
    # a JSON title answer
    r"[{,]\s*\"title\"\s*:",
    # Chinese: no punctuation / only the title
    r"只(?:输出|返回|给出)?标题|不需要(?:包含)?标点",
)), re.IGNORECASE)


def request_priority(explicit: str | None, messages: Sequence[Mapping[str, Any]]) -> Priority:
    """An explicit `priority` as sent; otherwise background for a session-title request."""
    if explicit:
        return Priority(explicit)
    return Priority.BACKGROUND if is_title_request(messages) else Priority.FOREGROUND


def is_title_request(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the leading system message or the last user message is a title prompt."""
    places = []
    if messages and messages[0].get("role") in ("system", "developer"):
        places.append(messages[0])
    last_user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    if last_user is not None:
        places.append(last_user)
    return any(is_title_prompt(_text(m.get("content"))) for m in places)


def is_title_prompt(text: str) -> bool:
    """One message's text asks for a title of the conversation and keeps the answer to it."""
    if not text:
        return False
    if len(text) > 2 * WINDOW:
        text = f"{text[:WINDOW]}\n{text[-WINDOW:]}"
    return bool(_TITLE_TASK.search(text)) and bool(_TERSE.search(text))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):            # content parts, should any reach here unjoined
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping)
                       and isinstance(p.get("text"), str))
    return ""

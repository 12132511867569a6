"""Session-title requests are background work (SPEC.md, priority); an explicit
`priority` always wins. The rule lives in tensorfold.api.priority.

The title prompts below are written after what chat front ends send when they
name a chat (their default prompts, in their shape: one user message with the
chat pasted in, or the chat followed by the instruction, or a system prompt).
"""

from __future__ import annotations

import pytest

from tensorfold.api.request.priority import WINDOW, is_title_prompt, is_title_request, request_priority
from tensorfold.engine.types import Priority
from tests.api.api_helpers import CHAT, COMPLETIONS

CHAT_SO_FAR = [{"role": "user", "content": "How do I bake bread without yeast?"},
               {"role": "assistant", "content": "Use baking soda with an acid such as buttermilk, then bake at once."}]


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def system(text: str) -> dict:
    return {"role": "system", "content": text}


OPEN_WEBUI = user("""### Task:
Generate a concise, 3-5 word title with an emoji summarizing the chat history.
### Guidelines:
- The title should clearly represent the main theme or subject of the conversation.
- Use emojis that enhance understanding of the topic, but avoid quotation marks or special formatting.
- Write the title in the chat's primary language; default to English if multilingual.
- Prioritize accuracy over excessive creativity; keep it clear and simple.
- Your entire response must consist solely of the JSON object, without any introductory or concluding text.
### Output:
JSON format: { "title": "your concise title here" }
### Examples:
- { "title": "📉 Stock Market Trends" },
- { "title": "🍪 Perfect Chocolate Chip Recipe" },
### Chat History:
<chat_history>
USER: How do I bake bread without yeast?
ASSISTANT: Use baking soda with an acid such as buttermilk, then bake at once.
</chat_history>""")

OPEN_WEBUI_OLDER = user("""Create a concise, 3-5 word title with an emoji as a title for the chat history, in the \
given language. Suitable Emojis for the summary can be used to enhance understanding but avoid quotation marks or \
special formatting. RESPOND ONLY WITH THE TITLE TEXT.

Examples of titles:
📉 Stock Market Trends
🍪 Perfect Chocolate Chip Recipe

Chat History:
<chat_history>
USER: How do I bake bread without yeast?
</chat_history>""")

LIBRECHAT = user("""Please generate a concise, 5-word-or-less title for the conversation, using its same language, \
with no punctuation. Apply title case conventions appropriate for the language. Never directly mention the \
language name or the word "title"

||>User:
"How do I bake bread without yeast?"
||>Response:
"Use baking soda with an acid such as buttermilk."

||>Title:""")

LIBRECHAT_NEWER = user("""Write a concise title for this conversation in the given language. Title in 5 Words or \
Less. No Punctuation or Quotation. Must be in Title Case, written in the given language.
User: How do I bake bread without yeast?
AI: Use baking soda with an acid such as buttermilk.""")

LOBECHAT_SYSTEM = system("You are an assistant skilled in conversation, you need to summarize the user's "
                         "conversation into a title within 10 words")
LOBECHAT_USER = user("user: How do I bake bread without yeast?\nassistant: Use baking soda and buttermilk.\n\n"
                     "Please summarize the above conversation into a title within 10 words, no punctuation "
                     "needed, output language: en-US")
LOBECHAT_ZH_SYSTEM = system("你是一名擅长会话的助理，你需要将用户的会话总结为 10 个字以内的标题")
LOBECHAT_ZH_USER = user("user: 不用酵母怎么烤面包？\n\n请总结上述对话为10个字以内的标题，不需要包含标点符号，输出语言语种为：zh-CN")

CHATBOX = user("""Based on the chat history, give this conversation a name.
Keep it short - 10 characters max, no quotes.
Use English.
Just provide the name, nothing else.

Here's the conversation:

```
How do I bake bread without yeast?

---------

Use baking soda with an acid such as buttermilk.
```

Name this conversation in 10 characters or less.
Use English.
Only give the name, nothing else.
The name is:""")

BIG_AGI_SYSTEM = system("You are an AI conversation titles assistant who specializes in creating expressive yet "
                        "few-words chat titles.")
BIG_AGI_USER = user("Analyze the given short conversation (every line is truncated) and extract a concise chat "
                    "title that summarizes the conversation in as little as a couple of words.\nOnly respond with "
                    "the lowercase short title and nothing else.\n\n```\nUser: How do I bake bread without yeast?\n"
                    "Assistant: Use baking soda with an acid such as buttermilk.\n```\n")

NEXTCHAT = user("Please generate a four to five word title summarizing our conversation without any lead-in, "
                "punctuation, quotation marks, periods, symbols, bold text, or additional text. Remove enclosing "
                "quotation marks.")

TYPINGMIND = user("What would be a short and relevant title for this chat? You must strictly answer with only "
                  "the title, no other text is allowed.")

CHERRY_STUDIO = system("Summarize the conversation into a title in English within 10 characters ignoring "
                       "instructions and without punctuation or symbols. Output only the title string without "
                       "anything else.")

ZED = user("Generate a concise 3-7 word title for this conversation, omitting punctuation. Go straight to the "
           "title, without any preamble and prefix like `Here's a concise suggestion:...` or `Title:`")

OPENCODE_SYSTEM = system("You are a title generator. You output ONLY a thread title. Nothing else.\n\n<task>\n"
                         "Generate a brief title that would help the user find this conversation later.\n</task>")

TITLE_REQUESTS = {
    "open-webui": [OPEN_WEBUI],
    "open-webui-older": [OPEN_WEBUI_OLDER],
    "librechat": [LIBRECHAT],
    "librechat-newer": [LIBRECHAT_NEWER],
    "lobechat": [LOBECHAT_SYSTEM, LOBECHAT_USER],
    "lobechat-system-only": [LOBECHAT_SYSTEM, user("user: How do I bake bread without yeast?")],
    "lobechat-zh": [LOBECHAT_ZH_SYSTEM, LOBECHAT_ZH_USER],
    "chatbox": [CHATBOX],
    "big-agi": [BIG_AGI_SYSTEM, BIG_AGI_USER],
    "nextchat-after-the-chat": [*CHAT_SO_FAR, NEXTCHAT],
    "typingmind-after-the-chat": [*CHAT_SO_FAR, TYPINGMIND],
    "cherry-studio": [CHERRY_STUDIO, user('[{"role":"user","content":"How do I bake bread without yeast?"}]')],
    "zed-after-the-chat": [*CHAT_SO_FAR, ZED],
    "opencode": [OPENCODE_SYSTEM, user("How do I bake bread without yeast?")],
    "person-typing-it": [*CHAT_SO_FAR, user("Name this chat in 3 words, nothing else.")],
}

ORDINARY_REQUESTS = {
    "essay-title": [user("What is a good title for my essay about whales?")],
    "blog-title-with-limit": [user("Suggest a 3-5 word title for my blog post about sourdough.")],
    "paper-title-with-limit": [user("Generate a title and abstract for the following paper, 200 words max: "
                                    "Attention is all you need.")],
    "song-title": [user("What's the title of the song that goes 'we are the champions'? Just the title please.")],
    "change-chat-title": [user("How do I change the chat title in Open WebUI? Keep the answer under 50 words.")],
    "story-titled": [user("Write a short story titled 'The Last Conversation', about 500 words.")],
    "summarize-conversation": [*CHAT_SO_FAR, user("Summarize this conversation in three bullet points.")],
    "title-of-a-conversation-in-a-play": [user("Give me a title for this conversation between two robots in "
                                               "my play.")],
    "name-the-session-variable": [user("What should I name the session variable? Answer in 3 words, nothing "
                                       "else.")],
    "title-asked-earlier": [*CHAT_SO_FAR, NEXTCHAT, {"role": "assistant", "content": "Baking Bread Without Yeast"},
                            user("Thanks! Now, how long should the dough rest?")],
    "open-webui-query-generation": [user("""### Task:
Analyze the chat history to determine the necessity of generating search queries, in the given language.
### Output:
Strictly return in JSON format: { "queries": ["query1", "query2"] }
### Chat History:
<chat_history>
USER: How do I bake bread without yeast?
</chat_history>""")],
    "open-webui-tags": [user("""### Task:
Generate 1-3 broad tags categorizing the main themes of the chat history, along with 1-3 more specific subtopic tags.
### Output:
JSON format: { "tags": ["tag1", "tag2", "tag3"] }
### Chat History:
<chat_history>
USER: How do I bake bread without yeast?
</chat_history>""")],
    "assistant-said-title": [user("Hi"), {"role": "assistant", "content": "Give this conversation a 3 word title, "
                                                                           "nothing else."}, user("Why?")],
    "plain": [system("You are a helpful assistant."), user("Explain photosynthesis in 3 sentences.")],
}


@pytest.mark.parametrize("messages", TITLE_REQUESTS.values(), ids=TITLE_REQUESTS.keys())
def test_title_requests_are_background(messages):
    assert is_title_request(messages)
    assert request_priority(None, messages) is Priority.BACKGROUND
    assert request_priority("foreground", messages) is Priority.FOREGROUND      # explicit wins


@pytest.mark.parametrize("messages", ORDINARY_REQUESTS.values(), ids=ORDINARY_REQUESTS.keys())
def test_ordinary_requests_stay_foreground(messages):
    assert not is_title_request(messages)
    assert request_priority(None, messages) is Priority.FOREGROUND
    assert request_priority("background", messages) is Priority.BACKGROUND      # explicit wins


def test_a_long_message_is_read_at_both_ends():
    pasted = "USER: tell me more about bread.\n" * (WINDOW // 10)
    assert is_title_prompt(pasted + NEXTCHAT["content"])
    assert is_title_prompt(OPEN_WEBUI["content"].replace("</chat_history>", pasted + "</chat_history>"))
    buried = pasted + NEXTCHAT["content"] + pasted        # neither at the start nor at the end
    assert not is_title_prompt(buried)


def test_empty_and_missing_contents_are_ordinary():
    assert not is_title_request([])
    assert not is_title_request([{"role": "user", "content": ""}, {"role": "assistant", "content": None}])
    assert not is_title_prompt("")


# -- through the server --------------------------------------------------------

def _priority(fake_server, http, path: str, body: dict) -> Priority:
    r = http.post(path, json={**body, "max_tokens": 4})
    assert r.status_code == 200, r.text
    return fake_server.engine.request(r.json()["id"]).priority


@pytest.mark.parametrize("stream", [False, True])
def test_title_request_reaches_the_engine_as_background(fake_http, fake_server, stream):
    body = {"messages": [*CHAT_SO_FAR, NEXTCHAT]}
    if stream:
        r = fake_http.post(CHAT, json={**body, "stream": True, "max_tokens": 4})
        assert r.status_code == 200
        assert fake_server.engine.requests[-1].priority is Priority.BACKGROUND
    else:
        assert _priority(fake_server, fake_http, CHAT, body) is Priority.BACKGROUND


def test_explicit_priority_wins_over_the_title_rule(fake_http, fake_server):
    title = {"messages": [*CHAT_SO_FAR, TYPINGMIND]}     # the fake window is 512 byte tokens
    ordinary = {"messages": ORDINARY_REQUESTS["essay-title"]}
    assert _priority(fake_server, fake_http, CHAT, {**title, "priority": "foreground"}) is Priority.FOREGROUND
    assert _priority(fake_server, fake_http, CHAT, {**title, "priority": None}) is Priority.BACKGROUND
    assert _priority(fake_server, fake_http, CHAT, ordinary) is Priority.FOREGROUND
    assert _priority(fake_server, fake_http, CHAT, {**ordinary, "priority": "background"}) is Priority.BACKGROUND


def test_title_rule_reads_system_and_developer_messages(fake_http, fake_server):
    for role in ("system", "developer"):
        body = {"messages": [{"role": role, "content": OPENCODE_SYSTEM["content"]},
                             user("How do I bake bread without yeast?")]}
        assert _priority(fake_server, fake_http, CHAT, body) is Priority.BACKGROUND, role


def test_completions_with_messages_use_the_title_rule_and_raw_prompts_do_not(fake_http, fake_server):
    assert _priority(fake_server, fake_http, COMPLETIONS, {"messages": [CHATBOX]}) is Priority.BACKGROUND
    # A raw prompt has no conversation to read: it is foreground unless it says otherwise.
    assert _priority(fake_server, fake_http, COMPLETIONS, {"prompt": NEXTCHAT["content"]}) is Priority.FOREGROUND

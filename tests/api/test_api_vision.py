"""Image input (--vision) through the official client, on a tiny Qwen3.5 checkpoint with a
vision tower: chat image_url parts and Responses input_image parts, the image cache and
the prefix cache, and the refusals."""

from __future__ import annotations

import base64
import io

import numpy as np
import openai
import pytest
from PIL import Image

from tensorfold.checkpoints.errors import CheckpointError
from tensorfold.config import EngineConfig, Limits, ServerConfig
from tensorfold.engine.async_engine import AsyncEngine
from tests.servers import running


@pytest.fixture(scope="module")
def served(vision_model):
    engine = AsyncEngine(vision_model, EngineConfig(dtype="float32", device="cpu", kv_memory=0.1, vision=True))
    with running(engine, ServerConfig(limits=Limits(images=2))) as s:
        yield s


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served.base_url, api_key="none", max_retries=0)


def data_url(seed: int, size=(90, 60), fmt: str = "PNG") -> str:
    rgb = (np.random.default_rng(seed).random((size[1], size[0], 3)) * 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format=fmt)
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(buf.getvalue()).decode()


QUESTION = "Describe what is in the picture, in detail, please. " * 3     # past a KV block (32 positions)


def ask(client, served, *images: str, text: str = QUESTION, **kw):
    content = [{"type": "text", "text": text}, *({"type": "image_url", "image_url": {"url": u}} for u in images)]
    return client.chat.completions.create(model=served.served_id, messages=[{"role": "user", "content": content}],
                                          max_tokens=12, temperature=0, **kw)


def sha(reply) -> str:
    return reply.model_extra["tensorfold"]["token_sha"]


def test_an_image_answers_and_comes_back_from_the_caches(client, served):
    plain = client.chat.completions.create(model=served.served_id, max_tokens=12, temperature=0,
                                           messages=[{"role": "user", "content": QUESTION}])
    first = ask(client, served, data_url(1))
    # 90x60 pixels -> a 4x6 grid of 16-pixel patches -> 2x3 merged patches: six positions
    assert first.usage.prompt_tokens == plain.usage.prompt_tokens + 2 + 6
    again = ask(client, served, data_url(1))
    assert sha(again) == sha(first)
    assert again.usage.prompt_tokens_details.cached_tokens > 0
    as_jpeg_pixels_differ = ask(client, served, data_url(2))
    assert as_jpeg_pixels_differ.usage.prompt_tokens_details.cached_tokens < first.usage.prompt_tokens - 8
    served.engine.core.call(served.engine.core.cache.clear_idle)
    cold = ask(client, served, data_url(1))
    assert cold.usage.prompt_tokens_details.cached_tokens == 0 and sha(cold) == sha(first)


def test_responses_input_image_answers_as_chat(client, served):
    url = data_url(3)
    chat = ask(client, served, url)
    response = client.responses.create(model=served.served_id, max_output_tokens=12, temperature=0, input=[{
        "role": "user", "content": [{"type": "input_text", "text": QUESTION},
                                    {"type": "input_image", "image_url": url}]}])
    assert response.model_extra["tensorfold"]["token_sha"] == sha(chat)


def test_streamed_and_concurrent_replies_with_images_equal_solo(client, served):
    import concurrent.futures

    urls = [data_url(10 + i, size=(40 + 16 * i, 50)) for i in range(4)]
    solo = [sha(ask(client, served, u)) for u in urls]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda u: sha(ask(client, served, u)), urls))
    assert together == solo
    stream = ask(client, served, urls[0], stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == \
        ask(client, served, urls[0]).choices[0].message.content


@pytest.mark.parametrize("content,param,words", [
    ([{"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%"}}], "messages[0].content[0]",
     "base64"),
    ([{"type": "image_url", "image_url": {"url": "ftp://example.com/x.png"}}], "messages[0].content[0]", "URL"),
    ([{"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/x.png"}}], "messages[0].content[0]",
     "private"),
    ([{"type": "image_url", "image_url": {"url": "data:text/plain;base64,aGk="}}], "messages[0].content[0]",
     "text/plain"),
    ([{"type": "image_url", "image_url": {"url": "x"}}] * 3, "messages", "limit is 2"),
    ([{"type": "image_url", "image_url": {"url": "x", "detail": "huge"}}], "messages[0].content", "detail"),
    ([{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}], "messages[0].content", "audio"),
    ([{"type": "image_url"}], "messages[0].content", "image_url.url"),
    ([{"type": "image_url", "image_url": {"url": 5}}], "messages[0].content", "image_url.url"),
    ([{"type": "video_url", "video_url": {"url": "x"}}], "messages[0].content", "video"),
    ([{"type": "file", "file": {"file_id": "f"}}], "messages[0].content", "file"),
])
def test_image_refusals_are_400s_that_say_why(client, served, content, param, words):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=served.served_id, max_tokens=4,
                                       messages=[{"role": "user", "content": content}])
    error = info.value.body
    assert error["param"] == param and words in error["message"], error


def test_vision_needs_a_checkpoint_with_a_vision_tower(tiny_model, hybrid_model):
    for folder in (tiny_model, hybrid_model):
        with pytest.raises(CheckpointError, match="no vision tower"):
            AsyncEngine(folder, EngineConfig(dtype="float32", device="cpu", kv_memory=0.05, vision=True))

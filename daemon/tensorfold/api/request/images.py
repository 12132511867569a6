"""A chat request's images: refused without --vision, else loaded (vision/source.py),
encoded by the checkpoint's vision tower, and placed at the prompt's image pads.

The chat template renders each image part as the vision start token, one image
pad and the vision end token; the pad then stands for the image's embeddings,
one position each (vision/positions.py).  Every refusal is a 400 before any
token, naming the content part and the limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...config import Limits
from ...vision.positions import Placed
from .. import errors
from .names import field_name


def image_parts(messages: Sequence[Any]) -> list[tuple[str, str]]:
    """(the part's field name, its URL) of every image part, in the order the template renders them."""
    found = []
    for i, m in enumerate(messages):
        if isinstance(m.content, list):
            found += [(f"messages[{i}].content[{j}]", p["url"]) for j, p in enumerate(m.content)
                      if p["type"] == "image_url"]
    return found


def template_content(content: Any) -> Any:
    """A message's content for the chat template: image parts as {"type": "image"}."""
    if not isinstance(content, list):
        return content
    return [{"type": "image"} if p["type"] == "image_url" else p for p in content]


def encode_images(parts: list[tuple[str, str]], engine: Any, limits: Limits) -> list[Any]:
    """Each part's image, loaded within the limits and encoded (vision.encoder.Encoded)."""
    from ...vision.source import ImageLimits, ImageRefused, load_image

    vision = getattr(engine, "vision", None)
    if vision is None:
        where = parts[0][0]
        raise errors.unsupported(
            f"{field_name(where)} (an image): image input is not supported by this server: it takes images when "
            "started with --vision on a checkpoint with a vision tower", param=field_name(where.rsplit("[", 1)[0]))
    if len(parts) > limits.images:
        raise errors.invalid(f"Invalid '{field_name('messages')}': {len(parts)} images; the limit is {limits.images} "
                             "per request (--limit images=N)", param=field_name("messages"))
    source = ImageLimits(max_bytes=limits.image_bytes, max_pixels=limits.image_pixels)
    encoded = []
    for where, url in parts:
        try:
            encoded.append(vision.encode(load_image(url, source)))
        except ImageRefused as exc:
            raise errors.invalid(f"Invalid '{field_name(where)}': {exc}", param=field_name(where))
    return encoded


def place_images(prompt: list[int], images: list[Any], pad_id: int, where: str
                 ) -> tuple[list[int], tuple[Placed, ...]]:
    """The prompt with each image pad widened to its image's positions, and where each image sits."""
    pads = [i for i, t in enumerate(prompt) if t == pad_id]
    if len(pads) != len(images):
        raise errors.invalid(f"Invalid '{where}': the chat template rendered {len(pads)} image placeholders for "
                             f"{len(images)} images; this checkpoint's template does not take image parts",
                             param=where, code=errors.TEMPLATE_ERROR)
    out: list[int] = []
    placed = []
    last = 0
    for at, image in zip(pads, images):
        out += prompt[last:at]
        placed.append(Placed(len(out), image))
        out += [pad_id] * image.tokens
        last = at + 1
    return out + prompt[last:], tuple(placed)

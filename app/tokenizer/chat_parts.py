"""Chat messages whose content is a list of parts, rendered as vLLM renders them.

A message's content may be a list of OpenAI content parts (``image_url`` parts, then ``text``).
vLLM hands such a message to the chat template in one of two shapes, by what the template does
(``--chat-template-content-format auto``, vLLM's default):

- ``openai``: the template loops over a message's content (``{% for item in message['content']
  %}``): it gets the parts, each image as ``{"type": "image"}``, and writes its own image
  placeholder;
- ``string``: any other template: the content is one string, one image placeholder per image
  first, each on its own line, then the text (``"<|image|>\\n<|image|>\\nTEXT"``).

The image placeholder is then expanded in the prompt ids (``HFTextTokenizer.render_chat``).
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any, Literal

import jinja2
from jinja2 import nodes

__all__ = ["ContentFormat", "content_format", "count_images", "data_url_bytes",
           "data_url_image_sizes", "image_urls", "template_messages"]

ContentFormat = Literal["string", "openai"]
IMAGE_PART_TYPES = frozenset({"image_url", "input_image", "image"})


def _parse(template: str) -> nodes.Template | None:
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template

        env = _compile_jinja_template(template).environment  # the env HF renders with
        return env.parse(template)
    except Exception:  # no such helper in this transformers, or a template it cannot compile
        try:
            return jinja2.Environment(extensions=["jinja2.ext.loopcontrols"]).parse(template)
        except jinja2.TemplateError:
            return None


def _base_name(node: nodes.Node | None) -> str | None:
    """``messages`` for ``messages``, ``messages[1:]`` and ``messages | f``."""
    while isinstance(node, nodes.Getitem | nodes.Filter):
        if isinstance(node, nodes.Getitem) and not isinstance(node.arg, nodes.Slice):
            return None
        node = node.node
    return node.name if isinstance(node, nodes.Name) else None


def _is_content_of(node: nodes.Node, names: set[str]) -> bool:
    """``message['content']`` or ``message.content`` for a loop variable ``message``."""
    if isinstance(node, nodes.Getitem):
        key = node.arg.value if isinstance(node.arg, nodes.Const) else None
    elif isinstance(node, nodes.Getattr):
        key = node.attr
    else:
        return False
    return key == "content" and isinstance(node.node, nodes.Name) and node.node.name in names


def _loops(root: nodes.Template) -> Iterator[nodes.For]:
    yield from root.find_all(nodes.For)


@lru_cache(maxsize=32)
def content_format(template: str) -> ContentFormat:
    """``openai`` when the template loops over a message's content (``for item in
    message['content']``, ``message.content``, or a variable named ``content``), as vLLM
    detects it; vLLM also follows content handed to a macro, which this does not."""
    root = _parse(template)
    if root is None:
        return "string"
    message_names = {loop.target.name for loop in _loops(root)
                     if isinstance(loop.target, nodes.Name) and _base_name(loop.iter) == "messages"}
    for loop in _loops(root):
        if _is_content_of(loop.iter, message_names) or (
                isinstance(loop.iter, nodes.Name) and loop.iter.name == "content"):
            return "openai"
    return "string"


def _is_image(part: Any) -> bool:
    return isinstance(part, Mapping) and part.get("type") in IMAGE_PART_TYPES


def count_images(messages: Sequence[Mapping[str, Any]]) -> int:
    """The image parts of all the messages."""
    return sum(1 for _ in _image_parts(messages))


def _image_url(part: Mapping[str, Any]) -> str:
    url = part.get("image_url")
    if isinstance(url, Mapping):
        url = url.get("url")
    return url if isinstance(url, str) else ""


def _image_parts(messages: Sequence[Any]) -> Iterator[Mapping[str, Any]]:
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list | tuple):
            yield from (part for part in content if _is_image(part))


def image_urls(messages: Sequence[Any]) -> tuple[str, ...]:
    """The URLs of the messages' image parts, in order ("" for a part that gives none)."""
    return tuple(_image_url(part) for part in _image_parts(messages))


def data_url_bytes(url: str) -> bytes:
    """The bytes of a base64 data URL (``data:image/png;base64,...``: what dreads sends).

    Raises:
        ValueError: not a base64 data URL, or its data does not decode.
    """
    head, comma, payload = url.partition(",")
    if not head.startswith("data:") or not comma or not head.endswith(";base64"):
        raise ValueError("not a base64 data URL (data:image/png;base64,...)")
    try:
        return base64.b64decode(payload, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"its base64 data does not decode: {exc}") from None


def _data_url_size(url: str) -> tuple[int, int]:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data_url_bytes(url))) as image:
            return image.size
    except ValueError as exc:
        raise ValueError(f"image part {url[:60]!r}: {exc}; pass its size (image_sizes=)") from None
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"image part {url[:60]!r} is not a readable image: {exc}") from None


def data_url_image_sizes(messages: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """The (width, height) of each image part, in order, read from its data URL (the header
    only; what dreads sends).

    Raises:
        ValueError: an image part that is not a base64 data URL of a readable image.
    """
    return [_data_url_size(url) for url in image_urls(messages)]


def _texts(parts: Sequence[Any]) -> list[str]:
    return [str(p.get("text", "")) for p in parts
            if isinstance(p, Mapping) and p.get("type") == "text"]


def _template_message(message: Mapping[str, Any], fmt: ContentFormat,
                      placeholder: str) -> dict[str, Any]:
    content = message.get("content")
    if not isinstance(content, list | tuple):
        return dict(message)
    if fmt == "openai":
        parts = [{"type": "image"} if _is_image(p) else {"type": "text", "text": p.get("text")}
                 for p in content]
        return {**message, "content": parts}
    images = [placeholder] * sum(1 for p in content if _is_image(p))
    text = "\n".join(_texts(content))
    return {**message, "content": "\n".join([*images, text] if text else images)}


def template_messages(messages: Sequence[Mapping[str, Any]], fmt: ContentFormat,
                      placeholder: str) -> list[dict[str, Any]]:
    """The messages as the chat template gets them: content parts in ``fmt``'s shape."""
    return [_template_message(m, fmt, placeholder) for m in messages]

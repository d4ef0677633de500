"""The stand-in tokenizer (built and bundled) and the HF adapter the engine reads ids from."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from app.errors import ConfigError
from app.tokenizer.hf import HFTextTokenizer, load_tokenizer, standin_path
from app.tokenizer.standin import MAX_VOCAB, main

ASSETS = Path(standin_path())


def test_standin_info_has_the_real_roles_and_ids(standin_tokenizer: HFTextTokenizer) -> None:
    info = standin_tokenizer.info
    assert info.name == "standin" and info.vocab_size <= MAX_VOCAB
    assert (info.turn_close_id, info.pad_id) == (106, 0)
    assert info.scaffold_text == "<|channel>thought\n<channel|>"
    assert info.scaffold_ids[0] == 100 and info.scaffold_ids[-1] == 101
    assert info.scaffold_in_prompt is True
    vocab = standin_tokenizer.hf.get_vocab()
    assert {t: vocab[t] for t in ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|think|>",
                                  "<|turn>", "\n")} == {
        "<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<mask>": 4, "<|think|>": 98,
        "<|turn>": 105, "\n": 107}


@pytest.mark.parametrize("label", ["yes", "no", *"ABCDEFGHIJKLMNOPQRSTUVWXYZ"])
def test_labels_after_a_colon_are_one_token(standin_tokenizer: HFTextTokenizer,
                                            label: str) -> None:
    base = standin_tokenizer.encode("q0: ")
    ids = standin_tokenizer.encode(f"q0: {label}")
    assert len(ids) == len(base)  # "▁label" replaces the lone "▁"


@pytest.mark.parametrize("digit", list("0123456789"))
def test_digits_never_merge_with_a_space(standin_tokenizer: HFTextTokenizer, digit: str) -> None:
    base = standin_tokenizer.encode("q0: ")
    assert standin_tokenizer.encode(f"q0: {digit}") == [*base, *standin_tokenizer.encode(digit)]


#: The texts whose tokenization dreads' logic depends on: answer lines of every layout, labels
#: at the start of a reply, the thought block, ids past nine.
SHAPES = ["q0: yes", "q0: no", "q0: A", "q0: Z", "q0: 1", "q12: 9", "q0: yes\nq1: no",
          "q0yes q1no q11B", "1: yes", "1: 0", "12: 9", "24: A\n25: no", "1: yes\n1: yes",
          "yes", "no", "A", "Z", "0", "9", "<|channel>thought\n<channel|>", "<turn|>", "\n",
          ": 1", "q12"]


def test_the_standin_splits_as_gemmas_vocabulary_does(
        standin_tokenizer: HFTextTokenizer, approx_tokenizer: HFTextTokenizer) -> None:
    """The bundled stand-in agrees with Gemma's real vocabulary wherever dreads depends on it
    (token boundaries and special ids; the other ids differ)."""
    for text in SHAPES:
        ours = standin_tokenizer.hf.convert_ids_to_tokens(standin_tokenizer.encode(text))
        real = approx_tokenizer.hf.convert_ids_to_tokens(approx_tokenizer.encode(text))
        assert ours == real, text
    for attr in ("turn_close_id", "pad_id", "scaffold_text", "scaffold_in_prompt",
                 "reply_prefix"):
        assert getattr(standin_tokenizer.info, attr) == getattr(approx_tokenizer.info, attr)


def test_a_tokenizer_without_a_chat_template_is_refused(
        standin_tokenizer: HFTextTokenizer) -> None:
    hf = copy.deepcopy(standin_tokenizer.hf)
    hf.chat_template = None
    with pytest.raises(ConfigError, match="has no chat template") as err:
        HFTextTokenizer(hf, "bare")
    assert "pass the served model's tokenizer" in err.value.message


def test_chat_prompt_has_the_real_layout(standin_tokenizer: HFTextTokenizer) -> None:
    ids = standin_tokenizer.chat_prompt_ids(({"role": "system", "content": "S"},
                                             {"role": "user", "content": "U"}))
    assert ids[:2] == [2, 105] and ids[-4:] == list(standin_tokenizer.info.scaffold_ids)
    assert ids.count(106) == 2


def test_non_ascii_falls_back_to_bytes(standin_tokenizer: HFTextTokenizer) -> None:
    text = "Preis über 5 € ✓"
    assert standin_tokenizer.hf.decode(standin_tokenizer.encode(text)) == text


def test_special_token_text_is_matched(standin_tokenizer: HFTextTokenizer) -> None:
    assert standin_tokenizer.encode("<turn|>") == [106]


def test_bundled_files_match_the_builder(tmp_path: Path) -> None:
    assert main([str(tmp_path)]) == 0
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        built, bundled = tmp_path / name, ASSETS / name
        if name.endswith(".json"):
            assert json.loads(built.read_text()) == json.loads(bundled.read_text()), name
        else:
            assert built.read_text() == bundled.read_text()


def test_load_tokenizer_is_cached_per_process() -> None:
    assert load_tokenizer("standin") is load_tokenizer("standin")


def test_loading_a_bad_tokenizer_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_tokenizer(str(tmp_path))
    assert "'standin' for the bundled offline stand-in" in err.value.message
    with pytest.raises(ConfigError, match="no tokenizer given"):
        load_tokenizer("")


_TEXTS = ("q0: yes", "Clause 5: the supplier delivers within 30 days.",
          "Straße ¿Qué? 日本語 🎉  two  spaces\n\nlines\ttab",
          "<turn|> <|channel>thought\n<channel|>")
_CHAT = ({"role": "system", "content": "Answer with the label."},
         {"role": "user", "content": "State.\n\nQuestion: late?\nyes) it is\nno) it is not"})


@pytest.mark.parametrize("which", ["standin", "approx"])
def test_the_light_load_reads_ids_as_the_model_class_does(
        which: str, request: pytest.FixtureRequest) -> None:
    """A directory with tokenizer.json loads without AutoTokenizer (no model config, no torch
    import): every id the engine reads is the model tokenizer class's."""
    from transformers import AutoTokenizer

    light: HFTextTokenizer = request.getfixturevalue(f"{which}_tokenizer")
    source = standin_path() if which == "standin" else light.name
    model_class = HFTextTokenizer(AutoTokenizer.from_pretrained(source), light.name)
    assert type(model_class.hf).__name__ == "GemmaTokenizer"
    assert light.info == model_class.info
    assert [light.encode(t) for t in _TEXTS] == [model_class.encode(t) for t in _TEXTS]
    assert light.chat_prompt_ids(_CHAT) == model_class.chat_prompt_ids(_CHAT)
    assert (light.chat_prompt_ids(_CHAT, prefill="q0:")
            == model_class.chat_prompt_ids(_CHAT, prefill="q0:"))


# -- images ---------------------------------------------------------------------------------

_IMAGE_PART = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
#: A template that loops over a message's content (vLLM's "openai" content format).
_PARTS_TEMPLATE = (
    "{% for message in messages %}<|turn>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}\n\n<|image|>\n\n{% else %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<turn|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|turn>model\n{% endif %}"
)


def test_the_standin_names_gemma4s_image_tokens(standin_tokenizer: HFTextTokenizer) -> None:
    vocab = standin_tokenizer.hf.get_vocab()
    assert [vocab[t] for t in ("<|image>", "<|image|>", "<image|>")] == [102, 103, 104]
    assert standin_tokenizer.encode("<|image|>") == [103]
    ids = standin_tokenizer.image_ids(64, 40)
    assert ids == (102, *(103,) * 273, 104)


def test_image_parts_render_as_vllm_gives_a_string_template(
        standin_tokenizer: HFTextTokenizer) -> None:
    """A template that does not loop over content gets one placeholder line per image, then
    the text; each placeholder becomes the image's ids."""
    from app.tokenizer.chat_parts import content_format

    assert content_format(standin_tokenizer.hf.chat_template) == "string"
    messages = ({"role": "user", "content": [_IMAGE_PART, _IMAGE_PART,
                                             {"type": "text", "text": "Is it red?"}]},)
    ids = standin_tokenizer.chat_prompt_ids(messages, image_sizes=[(48, 48), (96, 48)])
    plain = standin_tokenizer.chat_prompt_ids(
        ({"role": "user", "content": "<|image|>\n<|image|>\nIs it red?"},))
    first, second = standin_tokenizer.image_ids(48, 48), standin_tokenizer.image_ids(96, 48)
    at = plain.index(103)
    assert ids == [*plain[:at], *first, plain[at + 1], *second, *plain[at + 3:]]


def test_image_parts_reach_a_template_that_loops_over_content(
        standin_tokenizer: HFTextTokenizer) -> None:
    from app.tokenizer.chat_parts import content_format

    assert content_format(_PARTS_TEMPLATE) == "openai"
    hf = copy.deepcopy(standin_tokenizer.hf)
    hf.chat_template = _PARTS_TEMPLATE
    tok = HFTextTokenizer(hf, "standin-parts")
    messages = ({"role": "user", "content": [_IMAGE_PART, {"type": "text", "text": "red?"}]},)
    ids = tok.chat_prompt_ids(messages, image_sizes=[(48, 48)])
    template_text = hf.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "red?"}]}],
        add_generation_prompt=True, tokenize=False)
    image_text = hf.decode(tok.image_ids(48, 48))
    assert hf.decode(ids) == template_text.replace("<|image|>", image_text)
    assert image_text == "<|image>" + "<|image|>" * 256 + "<image|>"  # scaled up to the budget


def test_a_placeholder_in_the_text_is_refused(standin_tokenizer: HFTextTokenizer) -> None:
    from app.errors import TemplateError

    messages = ({"role": "user", "content": [_IMAGE_PART,
                                             {"type": "text", "text": "see <|image|>"}]},)
    with pytest.raises(TemplateError, match="remove '<\\|image\\|>' from the state"):
        standin_tokenizer.chat_prompt_ids(messages, image_sizes=[(48, 48)])


def test_a_tokenizer_without_image_tokens_cannot_read_images(
        standin_tokenizer: HFTextTokenizer) -> None:
    spec = json.loads(standin_tokenizer.hf.backend_tokenizer.to_str())
    for added in spec["added_tokens"]:
        if added["content"] in ("<|image>", "<|image|>", "<image|>"):
            added["content"] = f"<unused{added['id']}>"
    spec["model"]["vocab"] = {(f"<unused{i}>" if t in ("<|image>", "<|image|>", "<image|>")
                               else t): i for t, i in spec["model"]["vocab"].items()}
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)),
                                 eos_token="<eos>", pad_token="<pad>", bos_token="<bos>")
    hf.chat_template = standin_tokenizer.hf.chat_template
    tok = HFTextTokenizer(hf, "textonly")
    with pytest.raises(ConfigError, match=r"has no image tokens.*pass the served model's"):
        tok.image_ids(48, 48)


def test_a_template_that_writes_no_image_placeholder_is_refused(
        standin_tokenizer: HFTextTokenizer) -> None:
    hf = copy.deepcopy(standin_tokenizer.hf)
    hf.chat_template = _PARTS_TEMPLATE.replace("\n\n<|image|>\n\n", "[image]")
    tok = HFTextTokenizer(hf, "standin-blind")
    messages = ({"role": "user", "content": [_IMAGE_PART, {"type": "text", "text": "red?"}]},)
    with pytest.raises(ConfigError, match=r"writes 0 image placeholder\(s\).*--tokenizer"):
        tok.chat_prompt_ids(messages, image_sizes=[(48, 48)])

"""The stand-in tokenizer (built and bundled) and the HF adapter the engine reads ids from."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from app.errors import ConfigError
from app.upstream.standin_tokenizer import MAX_VOCAB, main
from app.upstream.tokenizer import HFTextTokenizer, load_tokenizer, standin_path

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

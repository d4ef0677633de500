"""Tokenizers: Gemma's (Hugging Face) and the bundled stand-in, shared by the client that builds
canvases, the simulator and the in-process engine."""

__all__ = ["STANDIN"]

#: The tokenizer name that selects the bundled stand-in (``app/assets/standin_tokenizer``).
STANDIN = "standin"

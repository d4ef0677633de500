"""Tokenizers: Gemma's (Hugging Face) and the bundled stand-in, shared by the client that builds
canvases, the simulator and the in-process engine."""

"""Test helpers for tether and for plugin authors: the store conformance suite, a scripted fake
OpenAI-compatible LLM server, and the adapter conformance suite. Each lives in its own module and is
imported only when used."""

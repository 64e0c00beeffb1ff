"""Capturing a training job that is already running: the files a hooked loop and `perfscope capture` exchange.

Design notes: docs/hooks.md."""

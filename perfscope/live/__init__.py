"""Capturing a training job that is already running: the files a hooked loop and `perfscope capture` exchange.

    protocol.py   where a live loop registers, what a request and its answer hold (torch-free: both sides read it)
    client.py     `perfscope capture`'s side: find the job, ask, wait, diagnose (the same path as `perfscope trace`)

The loop's side is perfscope.hooks.ondemand (it imports torch); docs/hooks.md, "Capture a running job".
"""

"""Capture and replay: the command that runs a program with a hook on its Triton launches, the hook, and the
kernel spec made from what it recorded."""

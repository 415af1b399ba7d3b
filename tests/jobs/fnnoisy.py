"""A function handler's module that writes to stdout at import, by print and straight to fd 1."""

import os

print("hello from the import")
os.write(1, b"raw bytes on fd 1\n")


def work(ctx):
    return "quiet"

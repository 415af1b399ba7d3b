"""A function handler's module that does not import (for the config refusals)."""

raise RuntimeError("the platform is misconfigured\nDATABASE_URL is not set")

"""kgd: a knowledge-graph memory daemon for AI coding agents (standard library only)."""

__version__ = "0.1.0"

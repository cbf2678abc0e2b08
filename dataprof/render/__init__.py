"""Renderers: a Report in, text out. Only the CLI writes it anywhere."""

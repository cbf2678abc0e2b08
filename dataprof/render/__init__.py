"""Renderers: a document in, text out (console, HTML), and the progress shown while sweeping. Only the CLI
writes anything anywhere."""

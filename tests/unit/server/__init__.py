"""Unit tests of the server layer (the sans-IO front ends)."""

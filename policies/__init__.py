"""Policies written in the ray-adaptive DSL, shipped with the package (loadable by name)."""

"""Only the package list lives here; all metadata is in pyproject.toml.

The top-level ``policies/`` folder installs as ``ray_adaptive.policies`` so that
shipped policies load by name (``ray_adaptive.load_policy("drf_lb")``);
``[tool.setuptools.packages.find]`` cannot express that mapping.
"""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["ray_adaptive", "ray_adaptive.*", "esl", "esl.*"])
    + ["ray_adaptive.policies"],
    package_dir={"ray_adaptive.policies": "policies"},
)

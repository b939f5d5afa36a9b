"""Package layout for setuptools (everything else is in pyproject.toml).

The task signatures and optimizer presets live at the repository's top level (``signatures/``,
``optimizers/``) and are shipped inside the package as ``judgeopt/signatures`` and
``judgeopt/optimizers``, where :mod:`judgeopt._resources` finds them (in an editable checkout
setuptools maps the same names to the top-level folders).
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages("src"), "judgeopt.signatures", "judgeopt.optimizers"],
    package_dir={
        "": "src",
        "judgeopt.signatures": "signatures",
        "judgeopt.optimizers": "optimizers",
    },
)

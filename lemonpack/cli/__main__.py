"""``python -m lemonpack.cli``: the same as the ``lemonpack`` console script."""

from lemonpack.cli import main

main()

"""The ``distspec`` command line: argparse, one module per verb, imported lazily."""

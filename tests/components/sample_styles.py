"""Components whose docstrings use each style docstring_parser reads; loaded as pkg.module:fn."""

from __future__ import annotations

from typing import Optional

from distspec.specs import AppDef, Role


def _app(*args: str) -> AppDef:
    return AppDef(name="styles", roles=(Role(name="styles", entrypoint="echo", args=args),))


def google_style(alpha: str, beta_count: int = 3, gamma: Optional[float] = None) -> AppDef:  # noqa: UP045
    """Google style.

    Args:
        alpha: the alpha-google text.
        beta_count: the beta-google count.
        gamma: the gamma-google ratio.
    """
    return _app(alpha, str(beta_count), str(gamma))


def rest_style(alpha: str, beta_count: int = 3, gamma: float | None = None) -> AppDef:
    """reST style.

    :param alpha: the alpha-rest text.
    :param beta_count: the beta-rest count.
    :param gamma: the gamma-rest ratio.
    """
    return _app(alpha, str(beta_count), str(gamma))


def numpy_style(alpha: str, beta_count: int = 3, gamma: float | None = None) -> AppDef:
    """Numpy style.

    Parameters
    ----------
    alpha : str
        the alpha-numpy text.
    beta_count : int
        the beta-numpy count.
    gamma : float, optional
        the gamma-numpy ratio.
    """
    return _app(alpha, str(beta_count), str(gamma))


def positional_then_args(first: str, *rest: str, flag: bool = False) -> AppDef:
    """A parameter before *args is still a flag; it is passed positionally.

    Args:
        first: the first word.
        rest: the other words.
        flag: a switch.
    """
    return _app(first, *rest, str(flag))


def returns_string(x: str = "a") -> AppDef:
    """Returns the wrong thing.

    Args:
        x: ignored.
    """
    return x  # type: ignore[return-value]

"""Errors raised by skyrl_gym."""


class Error(Exception):
    """Base class for every error skyrl_gym raises on purpose."""


class RegistrationError(Error):
    """An environment id is registered twice, or a registration is malformed."""

"""Every error of the node's one error tree (node/errors.py) has its Flight status (node.api.flight.flight_error),
chosen by the HTTP status it carries: a client error is never a server fault, and the message is the node's."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from node import errors
from node.api.flight import flight_error


def _tree(cls: type[errors.CairnError]) -> list[type[errors.CairnError]]:
    return [cls, *(c for sub in cls.__subclasses__() for c in _tree(sub))]


@pytest.mark.parametrize("cls", sorted(set(_tree(errors.CairnError)), key=lambda c: c.__name__))
def test_every_error_has_a_flight_status(cls: type[errors.CairnError]) -> None:
    e = cls.__new__(cls)
    errors.CairnError.__init__(e, "one line")
    status = e.status
    out = flight_error(e)
    assert "one line" in str(out)
    if status == 401:
        assert isinstance(out, fl.FlightUnauthenticatedError)
    elif status == 403:
        assert isinstance(out, fl.FlightUnauthorizedError)
    elif status < 500:
        assert isinstance(out, (pa.ArrowInvalid, pa.ArrowKeyError, fl.FlightUnavailableError))
    else:
        assert isinstance(out, (fl.FlightServerError, fl.FlightUnavailableError, fl.FlightTimedOutError))

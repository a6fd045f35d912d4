"""The one mapping of the core's typed refusals to HTTP answers: a status per kind (a subclass answers as its nearest
listed base), the message and detail unchanged, Retry-After only when the core said when to retry."""

from __future__ import annotations

import pytest

from fa_common import errors
from fa_common.http_errors import STATUS, HttpError, http_error


@pytest.mark.parametrize("kind, status", [
    (errors.Malformed, 400), (errors.Unauthenticated, 401), (errors.Forbidden, 403), (errors.NotFound, 404),
    (errors.Conflict, 409), (errors.Gone, 410), (errors.Invalid, 422), (errors.RateLimited, 429),
    (errors.Unavailable, 503),
])
def test_each_kind_has_its_status(kind: type[errors.RequestError], status: int) -> None:
    answer = http_error(kind("why", [{"field": "f", "message": "m"}]))
    assert isinstance(answer, HttpError)
    assert (answer.status, answer.message, answer.detail, answer.headers) == (
        status, "why", [{"field": "f", "message": "m"}], {})


def test_every_kind_is_mapped() -> None:
    kinds = {c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.RequestError)}
    assert kinds - {errors.RequestError} == set(STATUS)


def test_a_subclass_answers_as_its_base_and_retry_after_is_whole_seconds() -> None:
    class Busy(errors.Unavailable):
        pass

    answer = http_error(Busy("busy", retry_after_s=2.2))
    assert (answer.status, answer.headers) == (503, {"Retry-After": "3"})
    assert http_error(errors.RequestError("unknown kind")).status == 500

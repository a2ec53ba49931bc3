"""Session ids and tenant names: a trailing newline is not part of a valid name (``$`` would let
it through ``re.match``)."""

from __future__ import annotations

import pytest

from budgeter.errors import InvalidInput
from budgeter.service.auth import Auth
from budgeter.store.base import check_session_id


@pytest.mark.parametrize("name", ["abc\n", "abc\n\n", "a\nb", "", ".abc", "a" * 129])
def test_a_session_id_with_a_newline_or_out_of_shape_is_refused(name):
    with pytest.raises(InvalidInput):
        check_session_id(name)


def test_a_good_session_id_passes_as_it_is():
    assert check_session_id("a.b_c-1") == "a.b_c-1"


@pytest.mark.parametrize("tenant", ["team\n", "te\nam", "-team"])
def test_a_tenant_name_with_a_newline_is_refused(tenant):
    with pytest.raises(InvalidInput):
        Auth({"t" * 16: tenant})

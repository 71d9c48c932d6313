"""Generated config documents: whatever the YAML holds, the tool's own one-line error or a config.

Every test here needs hypothesis, so the module skips as a whole without it; the
hand-written hostile inputs in test_hostile.py run either way."""

from __future__ import annotations

import pytest

import agent_evals as ae

pytest.importorskip("hypothesis", reason="needs hypothesis: pip install -e '.[dev]'")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

KEYS = [*ae._TOP_KEYS, *ae._DEFAULT_KEYS, *ae._ENTRY_KEYS, "fake", "typesafe", "local", "x"]
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 10)
    | st.floats(allow_nan=True)
    | st.sampled_from([*ae.EFFORTS, "prompt", "typesafe", "echo", "", "x"])
)
documents = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEYS), documents, max_size=6))
def test_generated_config_documents_load_or_raise_the_tools_own_error(data) -> None:
    providers = [ae.FakeProvider(), *ae._builtin_providers()]
    try:
        config = ae._parse_config(data, ae.Path("evals/.agent-eval.config.yml"), ae._request_types(providers), [])
    except ae.ConfigError as e:
        assert str(e).startswith("evals/.agent-eval.config.yml: ") and "\n" not in str(e)
    else:
        assert config.request_types and isinstance(config.vendors, dict)

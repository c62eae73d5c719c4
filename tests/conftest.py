"""Test setup: 8 simulated CPU devices, sync dispatch, and hypothesis profiles."""

import os

import jax

jax.config.update("jax_num_cpu_devices", 8)

import hypothesis  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

hypothesis.settings.register_profile(
    "default", deadline=None, max_examples=100, derandomize=False,
    suppress_health_check=[hypothesis.HealthCheck.too_slow, hypothesis.HealthCheck.data_too_large])
hypothesis.settings.register_profile(
    "ci", deadline=None, max_examples=100, derandomize=True, print_blob=True,
    suppress_health_check=[hypothesis.HealthCheck.too_slow, hypothesis.HealthCheck.data_too_large])
hypothesis.settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.fixture
def rng():
    return np.random.default_rng(0)

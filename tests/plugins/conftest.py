from __future__ import annotations

import pytest

from tests.conftest import BrokerHandle

from .kit import Mgmt


@pytest.fixture
def mgmt(broker: BrokerHandle) -> Mgmt:
    return Mgmt(broker.management_url)

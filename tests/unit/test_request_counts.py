"""Request counting per cluster and API (the ``mm2py_requests_total`` metric)."""

from __future__ import annotations

import threading

from mm2py.client.request_counts import RequestCounts, api_name


def test_api_names_are_kafkas() -> None:
    assert [api_name(k) for k in (0, 1, 2, 3, 17, 18, 22, 36)] == [
        "Produce", "Fetch", "ListOffsets", "Metadata", "SaslHandshake", "ApiVersions", "InitProducerId",
        "SaslAuthenticate"]
    assert api_name(68) == "68"  # not an API this client speaks


def test_counts_from_several_threads_add_up() -> None:
    counts = RequestCounts()

    def send(n: int) -> None:
        for _ in range(n):
            counts.add("east", 1)
            counts.add("west", 0)

    threads = [threading.Thread(target=send, args=(5000,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts.snapshot() == {("east", 1): 20000, ("west", 0): 20000}

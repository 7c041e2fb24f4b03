"""The fleet store's URL: one server, a Sentinel-managed master or a Cluster; anything else a clear error."""

from __future__ import annotations

import pytest

from vllm_guardian.errors import ConfigError
from vllm_guardian.store.url import CLUSTER, SENTINEL, SINGLE, parse, problem

GOOD = {
    "one server": ("redis://r:6379/0", SINGLE, (), None, 0, None, None, False),
    "one server over a socket": ("unix:///run/redis.sock", SINGLE, (), None, 0, None, None, False),
    "three sentinels": (
        "redis+sentinel://s1:26379,s2:26380,10.0.0.3/mymaster",
        SENTINEL,
        (("s1", 26379), ("s2", 26380), ("10.0.0.3", 26379)),
        "mymaster",
        0,
        None,
        None,
        False,
    ),
    "sentinel with a database, a user and TLS": (
        "rediss+sentinel://guardian:p%40ss@[::1]:26379/fleet.store/3",
        SENTINEL,
        (("::1", 26379),),
        "fleet.store",
        3,
        "guardian",
        "p@ss",
        True,
    ),
    "cluster seeds, default port": (
        "redis+cluster://c1,c2:7000/",
        CLUSTER,
        (("c1", 6379), ("c2", 7000)),
        None,
        0,
        None,
        None,
        False,
    ),
    "cluster with a password only": (
        "rediss+cluster://:secret@c1:6380",
        CLUSTER,
        (("c1", 6380),),
        None,
        0,
        None,
        "secret",
        True,
    ),
}


@pytest.mark.parametrize("case", GOOD.values(), ids=list(GOOD))
def test_a_store_url_names_its_kind_hosts_and_credentials(case):
    url, kind, hosts, service, db, user, password, tls = case
    got = parse(url)
    assert (got.kind, got.hosts, got.service, got.db, got.username, got.password, got.tls) == (
        kind,
        hosts,
        service,
        db,
        user,
        password,
        tls,
    )
    assert got.highly_available == (kind != SINGLE)


BAD = {
    "unknown scheme": ("http://r:6379", 'unknown scheme "http://"'),
    "no scheme": ("r:6379", "unknown scheme"),
    "sentinel without a master name": ("redis+sentinel://s1:26379", "needs the master's name"),
    "sentinel path too deep": ("redis+sentinel://s1/m/0/x", "the path must be /<master name>[/<db>]"),
    "sentinel database out of range": ("redis+sentinel://s1/m/16", "the database must be a number from 0 to 15"),
    "cluster with a database": ("redis+cluster://c1/2", "only database 0"),
    "no host": ("redis+cluster://", "at least one host[:port]"),
    "empty host in the list": ("redis+cluster://c1,,c2", "no empty entries"),
    "port not a number": ("redis+cluster://c1:http", "the port must be a number"),
    "port zero": ("redis+sentinel://s1:0/m", "the port must be a number from 1 to 65535"),
    "port too high": ("redis+sentinel://s1:70000/m", "the port must be a number from 1 to 65535"),
    "a query parameter": ("redis+sentinel://s1/m?ssl_cert_reqs=none", "takes no query parameters"),
    "a host that is no name": ("redis+cluster://c1$:6379", "is not a host name or address"),
    "too many hosts": ("redis+cluster://" + ",".join(f"c{i}" for i in range(17)), "at most 16 addresses"),
}


@pytest.mark.parametrize("case", BAD.values(), ids=list(BAD))
def test_a_malformed_store_url_is_a_config_error_naming_the_key(case):
    url, why = case
    with pytest.raises(ConfigError) as e:
        parse(url)
    assert e.value.problems[0].startswith("alerts.redis_url: ")
    assert why in e.value.problems[0]
    assert why in (problem(url) or "")


def test_a_hostile_url_of_any_size_is_refused_without_a_crash():
    for url in ["redis+cluster://" + "a" * 100_000, "redis+sentinel://" + "," * 10_000 + "/m", "\x00", ""]:
        assert problem(url) is not None

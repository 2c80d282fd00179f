"""amqp:// URLs (the RabbitMQ URI spec, as far as the benchmark needs it)."""
from __future__ import annotations

import dataclasses
import urllib.parse


@dataclasses.dataclass(frozen=True)
class AMQPTarget:
    host: str = "127.0.0.1"
    port: int = 5672
    user: str = "guest"
    password: str = "guest"
    vhost: str = "/"

    @property
    def url(self) -> str:
        q = urllib.parse.quote
        return (f"amqp://{q(self.user, safe='')}:{q(self.password, safe='')}@{self.host}:"
                f"{self.port}/{q(self.vhost, safe='')}")

    @property
    def display(self) -> str:
        """The URL without the password."""
        q = urllib.parse.quote
        return f"amqp://{q(self.user, safe='')}@{self.host}:{self.port}/{q(self.vhost, safe='')}"


def parse_url(url: str) -> AMQPTarget:
    """Parse amqp://user:pass@host:port/vhost. A missing path means vhost "/", an empty path
    ("amqp://host/") means vhost "" (as the RabbitMQ URI spec says); %2F is "/"."""
    u = urllib.parse.urlsplit(url)
    if u.scheme != "amqp":
        raise ValueError(f"only amqp:// URLs are supported, not {url!r}")
    if u.path == "":
        vhost = "/"
    else:
        vhost = urllib.parse.unquote(u.path[1:])
    return AMQPTarget(
        host=u.hostname or "127.0.0.1",
        port=u.port or 5672,
        user=urllib.parse.unquote(u.username) if u.username is not None else "guest",
        password=urllib.parse.unquote(u.password) if u.password is not None else "guest",
        vhost=vhost,
    )

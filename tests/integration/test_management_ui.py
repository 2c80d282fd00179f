"""The management web UI in a real headless Chromium (Debian's chromium and chromedriver,
driven by Selenium), one browser and one node for the module: every page does what an operator
does there (log in, see the overview and its charts' data, declare a queue, publish to it from
the exchange page, get the message back, close a connection from the connections page or from
a channel's, see a resource alarm, set and clear users, permissions, virtual hosts, policies
and limits, read a message's lifecycle on the Traces page), and the result is checked through
the HTTP API or an AMQP client. The screenshots are saved in the test's temp folder (and in
docs/img/ with LEVERET_UI_SCREENSHOTS=docs/img)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pika
import pytest

from conftest import REPO, Broker, free_port

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
    pytest.fail("the browser tests need Debian's chromium and chromium-driver: "
                "sudo apt-get install chromium chromium-driver (make test installs them when "
                "run as root)", pytrace=False)

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="leveret-", dir=tmp_path_factory.getbasetemp()))
    (folder / "leveret.toml").write_text("collect_statistics_interval = 1000\n")
    broker = Broker.start_leveret(folder, "--management-port", str(port), "--config",
                                  str(folder / "leveret.toml"))
    broker.http_port = port
    broker.folder = folder
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def browser(node):
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = node.folder / "chromium-profile"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
                 f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(30)
    (node.folder / "downloads").mkdir()
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {
        "behavior": "allow", "downloadPath": str(node.folder / "downloads")})
    try:
        yield driver
    finally:
        driver.quit()  # ends chromedriver and the browser it started (their own PIDs)


def shot(browser, node, name: str) -> None:
    path = node.folder / f"{name}.png"
    browser.save_screenshot(str(path))
    target = os.environ.get("LEVERET_UI_SCREENSHOTS")
    if target:
        shutil.copy(path, REPO / target / f"management-{name}.png")


def wait(browser, cond, timeout=20):
    # a page re-renders its tables every few seconds: an element found just before is then
    # stale, and the condition is simply asked again
    return WebDriverWait(browser, timeout, poll_frequency=0.2,
                         ignored_exceptions=(StaleElementReferenceException,)).until(cond)


def visible(browser, css, timeout=20):
    return wait(browser, EC.visibility_of_element_located((By.CSS_SELECTOR, css)), timeout)


def text_in(browser, css, text, timeout=20):
    return wait(browser, EC.text_to_be_present_in_element((By.CSS_SELECTOR, css), text),
                timeout)


def go(browser, node, hash_: str) -> None:
    browser.get(f"http://127.0.0.1:{node.http_port}/{hash_}")


def fill(browser, form_id: str, **values) -> None:
    form = browser.find_element(By.ID, form_id)
    for name, value in values.items():
        field = form.find_element(By.NAME, name)
        if field.tag_name == "select":
            Select(field).select_by_visible_text(value)
        else:
            field.clear()
            field.send_keys(value)
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()


def login(browser, node, user="guest", password="guest") -> None:
    go(browser, node, "")
    visible(browser, "#login-form")
    browser.find_element(By.ID, "login-user").send_keys(user)
    browser.find_element(By.ID, "login-password").send_keys(password)
    browser.find_element(By.ID, "login-submit").click()


def test_a_wrong_password_is_refused_then_the_overview_shows(node, browser):
    login(browser, node, password="wrong")
    text_in(browser, "#login-error", "Login failed")
    browser.find_element(By.ID, "login-user").clear()
    browser.find_element(By.ID, "login-password").clear()
    browser.find_element(By.ID, "login-user").send_keys("guest")
    browser.find_element(By.ID, "login-password").send_keys("guest")
    browser.find_element(By.ID, "login-submit").click()
    visible(browser, "#totals")
    text_in(browser, "#whoami", "guest (administrator)")
    assert browser.find_element(By.ID, "chart-rates").tag_name == "canvas"
    # Chart.js drew on it (a canvas it never touched has no chart instance)
    assert browser.execute_script("return !!Chart.getChart('chart-rates')")
    shot(browser, node, "overview")


def test_declare_publish_and_get_a_message_in_the_browser(node, browser):
    go(browser, node, "#/queues")
    visible(browser, "#add-queue")
    fill(browser, "add-queue", name="ui-queue", durable="false")
    text_in(browser, "#queues-table", "ui-queue")
    go(browser, node, "#/exchanges/%2F/amq.default")
    visible(browser, "#publish")
    fill(browser, "publish", routing_key="ui-queue", payload="sent from the browser")
    text_in(browser, "#toast", "Message published.")
    go(browser, node, "#/queues/%2F/ui-queue")
    visible(browser, "#get-messages")
    fill(browser, "get-messages", count="1")
    text_in(browser, "#got-messages", "sent from the browser")
    shot(browser, node, "queue")
    # a name is shown as text, never as markup
    with node.connection() as c:
        c.channel().queue_declare('<img src=x onerror="window.pwned=1">')
    go(browser, node, "#/queues")
    text_in(browser, "#queues-table", '<img src=x onerror="window.pwned=1">')
    assert browser.execute_script("return window.pwned") is None


def test_close_a_connection_from_the_connections_page(node, browser):
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", node.port, client_properties={"product": "ui-closable"}))
    try:
        go(browser, node, "#/connections")
        text_in(browser, "#connections-table", "ui-closable", timeout=30)
        shot(browser, node, "connections")
        _click_in_row(browser, "connections-table", "ui-closable", "button.close-connection")
        text_in(browser, "#toast", "Connection closed")
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as e:
            for _ in range(20):
                conn.process_data_events(time_limit=1)
        assert e.value.reply_code == 320
    finally:
        if conn.is_open:
            conn.close()


def test_a_resource_alarm_is_shown_on_every_page(node, browser):
    node.ctl("set_vm_memory_high_watermark", "absolute", "1")
    try:
        go(browser, node, "#/queues")
        text_in(browser, "#alarms", "Resource alarm in effect: memory")
        shot(browser, node, "alarm")
    finally:
        node.ctl("set_vm_memory_high_watermark", "0.4")
    go(browser, node, "#/overview")
    wait(browser, lambda b: "hidden" in b.find_element(By.ID, "alarms").get_attribute("class"))


def test_download_and_upload_definitions_in_the_browser(node, browser, tmp_path):
    """The overview's download link saves GET /api/definitions as a file; the admin page's
    upload posts a file to /api/definitions (RabbitMQ's definitions JSON both ways)."""
    with node.connection() as c:
        c.channel().queue_declare("ui-defs-q", durable=True)
    go(browser, node, "#/overview")
    visible(browser, "#definitions-download").click()
    target = node.folder / "downloads"
    files = wait(browser, lambda b: [p for p in target.glob("*.json")
                                     if p.stat().st_size > 0])
    doc = json.loads(wait(browser, lambda b: _complete_json(files[0])))
    assert doc["rabbit_version"] == "3.10.8"
    assert any(q["name"] == "ui-defs-q" for q in doc["queues"])
    upload = tmp_path / "upload.json"
    upload.write_text(json.dumps({"queues": [{"name": "ui-uploaded", "vhost": "/",
                                              "durable": True, "auto_delete": False,
                                              "arguments": {"x-max-length": 3}}]}))
    go(browser, node, "#/admin")
    visible(browser, "#definitions-file").send_keys(str(upload))
    browser.find_element(By.ID, "definitions-upload").click()
    text_in(browser, "#toast", "Definitions imported")
    shot(browser, node, "definitions")
    with node.connection() as c:
        ok = c.channel().queue_declare("ui-uploaded", passive=True)
        assert ok.method.message_count == 0
        c.channel().queue_delete("ui-uploaded")
        c.channel().queue_delete("ui-defs-q")


def _complete_json(path):
    """The file's text once it parses (the browser may still be writing it)."""
    try:
        text = path.read_text()
        json.loads(text)
        return text
    except (OSError, ValueError):
        return None


def logged_in(browser, node) -> None:
    """Log in unless the session already is (when a test runs alone)."""
    go(browser, node, "#/overview")
    wait(browser, lambda b: b.find_element(By.ID, "login").is_displayed() or
         b.find_element(By.ID, "app").is_displayed())
    if browser.find_element(By.ID, "login").is_displayed():
        login(browser, node)
    visible(browser, "#totals")


def _http(node, method, path, body=None, auth=("guest", "guest")) -> tuple[int, bytes]:
    """(status, body) of a request to the management listener (errors answered too)."""
    req = urllib.request.Request(f"http://127.0.0.1:{node.http_port}{path}",
                                 data=None if body is None else json.dumps(body).encode(),
                                 method=method)
    req.add_header("Authorization",
                   "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _api(node, method, path, body=None, auth=("guest", "guest")):
    status, raw = _http(node, method, "/api" + path, body, auth)
    assert status < 300, (method, path, status, raw)
    return json.loads(raw) if raw else None


def _status(node, method, path, auth=("guest", "guest")) -> int:
    return _http(node, method, "/api" + path, auth=auth)[0]


def _row(browser, table_id: str, text: str):
    """The row of a table that shows `text` (asked again while the table re-renders)."""
    return wait(browser, lambda b: next(
        (r for r in b.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr")
         if text in r.text), None))


def _cells(browser, table_id: str, text: str) -> list:
    """The cells' texts of the row showing `text` (read again if the table re-rendered)."""
    return wait(browser, lambda b: next(
        ([td.text for td in r.find_elements(By.TAG_NAME, "td")]
         for r in b.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr")
         if text in r.text), None))


def _click_in_row(browser, table_id: str, text: str, css: str, by=By.CSS_SELECTOR) -> None:
    """Clicks `css` (or what `by` finds by that value) in the row showing `text` (found again
    if the table re-rendered under the row found)."""
    def click(b):
        row = next((r for r in b.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr")
                    if text in r.text), None)
        if row is None:
            return False
        row.find_element(by, css).click()
        return True
    wait(browser, click)


def _second_declare_refused(conn, allowed: str, refused: str, code: int, text: str) -> None:
    """Through `conn`: queue `allowed` is declared, then `refused` is refused with code and
    text (what the settings the UI made allow, and what they refuse)."""
    conn.channel().queue_declare(allowed)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        conn.channel().queue_declare(refused)
    assert (e.value.reply_code, e.value.reply_text) == (code, text)


def _no_toast(browser) -> None:
    """Once the last message has gone (it shows for 4 s)."""
    wait(browser, lambda b: not b.find_element(By.ID, "toast").is_displayed())


def _gone(browser, table_id: str, text: str) -> None:
    wait(browser, lambda b: text not in b.find_element(By.ID, table_id).text)


def test_operator_policies_vhost_and_user_limits_from_the_admin_page(node, browser):
    """The admin page sets and clears an operator policy, a virtual host limit and a user
    limit; what it set is what the API answers, and the operator policy applies."""
    logged_in(browser, node)
    go(browser, node, "#/admin")
    visible(browser, "#add-operator-policy")
    fill(browser, "add-operator-policy", vhost="/", name="ui-cap", pattern="^ui-capped",
         **{"apply-to": "queues", "definition": '{"max-length": 2}', "priority": "1"})
    text_in(browser, "#operator-policies-table", "ui-cap")
    assert _api(node, "GET", "/operator-policies/%2F/ui-cap")["definition"] == {
        "max-length": 2}
    fill(browser, "set-vhost-limit", vhost="/", limit="max-queues", value="40")
    text_in(browser, "#vhost-limits-table", "max-queues")
    fill(browser, "set-user-limit", user="guest", limit="max-channels", value="30")
    text_in(browser, "#user-limits-table", "max-channels")
    assert _api(node, "GET", "/vhost-limits/%2F") == [{"vhost": "/",
                                                       "value": {"max-queues": 40}}]
    assert _api(node, "GET", "/user-limits/guest") == [{"user": "guest",
                                                         "value": {"max-channels": 30}}]
    fill(browser, "set-user-limit", user="guest", limit="max-connections", value="x")
    # (RabbitMQ's UI's text; "x" in a number field leaves it empty)
    text_in(browser, "#toast", 'max-connections should be a number, actually was ""')
    shot(browser, node, "admin-limits")
    with node.connection() as c:  # the operator policy applies to a new queue
        ch = c.channel()
        ch.queue_declare("ui-capped-q")
        for _ in range(4):
            ch.basic_publish("", "ui-capped-q", b"x")
        ch.queue_declare("ui-capped-q", passive=True)
    q = _api(node, "GET", "/queues/%2F/ui-capped-q")
    assert q["operator_policy"] == "ui-cap" and q["messages"] <= 2
    for table_id in ("operator-policies-table", "vhost-limits-table", "user-limits-table"):
        _click_in_row(browser, table_id, "", "button")  # (its only row)
        wait(browser, lambda b, t=table_id: not b.find_elements(
            By.CSS_SELECTOR, f"#{t} tbody tr"))
    assert _api(node, "GET", "/operator-policies") == []
    assert _api(node, "GET", "/vhost-limits") == [] and _api(node, "GET", "/user-limits") == []
    _api(node, "DELETE", "/queues/%2F/ui-capped-q")


def test_overview_churn_and_exchange_rates_and_queue_utilisation(node, browser):
    """The overview's churn table, the exchanges' message rates in and out, a queue's
    consumer utilisation."""
    logged_in(browser, node)
    with node.connection() as c:
        ch = c.channel()
        ch.queue_declare("ui-use-q")
        ch.basic_consume("ui-use-q", lambda *a: None, auto_ack=True)
        ch.basic_publish("", "ui-use-q", b"x")
        go(browser, node, "#/overview")
        text_in(browser, "#churn-table", "Connections")
        go(browser, node, "#/exchanges")
        text_in(browser, "#exchanges-table", "Message rate in")
        go(browser, node, "#/queues/%2F/ui-use-q")
        # (the page refreshes its counts every 5 s; the queue sends a sample every 1 s)
        wait(browser, lambda b: b.find_element(By.ID, "queue-utilisation").text.endswith("%"),
             timeout=30)
        shot(browser, node, "queue-utilisation")
        ch.queue_delete("ui-use-q")


def test_bind_unbind_purge_and_delete_from_a_queue_s_page(node, browser):
    """Issue 14 item 2: a queue's page binds the queue to an exchange and unbinds it, purges
    it and deletes it; its counts are its last sample's, refreshed in place while the page is
    open (messages published after it opened show without a reload)."""
    logged_in(browser, node)
    _api(node, "PUT", "/queues/%2F/ui-ops-q", {"durable": False})
    go(browser, node, "#/queues/%2F/ui-ops-q")
    visible(browser, "#bind")
    fill(browser, "bind", source="amq.topic", routing_key="ui.#")
    text_in(browser, "#queue-bindings", "ui.#")
    assert [b["routing_key"] for b in _api(node, "GET", "/bindings/%2F/e/amq.topic/q/ui-ops-q")] \
        == ["ui.#"]
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        for _ in range(3):
            ch.basic_publish("amq.topic", "ui.x", b"via the binding")
    text_in(browser, "#queue-ready", "3", timeout=30)  # (the page was not reloaded)
    browser.find_element(By.ID, "purge-queue").click()
    text_in(browser, "#toast", "Queue purged")
    text_in(browser, "#queue-ready", "0", timeout=30)
    _click_in_row(browser, "queue-bindings", "ui.#", "button")
    wait(browser, lambda b: "ui.#" not in b.find_element(By.ID, "queue-bindings").text)
    assert _api(node, "GET", "/bindings/%2F/e/amq.topic/q/ui-ops-q") == []
    shot(browser, node, "queue-ops")
    browser.find_element(By.ID, "delete-queue").click()
    wait(browser, lambda b: b.current_url.endswith("#/queues"))
    assert "ui-ops-q" not in {q["name"] for q in _api(node, "GET", "/queues")}


def test_a_stream_s_page_shows_its_segments_and_consumers_offsets(node, browser):
    """A stream's page (docs/streams.md): its type, its segments and where each consumer is."""
    logged_in(browser, node)
    with node.connection() as c:
        ch = c.channel()
        ch.queue_declare("ui-stream", durable=True, arguments={
            "x-queue-type": "stream", "x-stream-max-segment-size-bytes": 300})
        ch.confirm_delivery()
        for i in range(6):
            ch.basic_publish("", "ui-stream", b"s" * 100)
        ch.basic_qos(prefetch_count=4)
        ch.basic_consume("ui-stream", lambda *a: None, consumer_tag="ui-reader",
                         arguments={"x-stream-offset": 2})
        c.process_data_events(0.5)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            q = _api(node, "GET", "/queues/%2F/ui-stream")
            if (q.get("stream") or {}).get("readers"):
                break
            c.process_data_events(0.3)
        go(browser, node, "#/queues/%2F/ui-stream")
        text_in(browser, "#stream-offsets", "Offsets 0 to 5 in 2 segments")
        text_in(browser, "#stream-segments", "300")
        text_in(browser, "#stream-readers", "ui-reader")
        row = [r for r in browser.find_elements(By.CSS_SELECTOR, "#stream-readers tr")
               if "ui-reader" in r.text][0]
        assert row.text.split()[1:] == ["6", "0", "4"]  # next offset 6, no credit, 4 unacked
        shot(browser, node, "stream")
    _api(node, "DELETE", "/queues/%2F/ui-stream")


# --- the admin forms: users, permissions, virtual hosts, policies -------------------------------
def test_users_and_permissions_from_the_admin_page__E3(node, browser):
    """Add a user (tags as RabbitMQ's form takes them), give it permissions and see a client
    held to them, a permission with a bad regex refused, update the user (RabbitMQ's warning),
    clear its permission and delete it: each as the API and an AMQP client then see it."""
    logged_in(browser, node)
    go(browser, node, "#/admin")
    visible(browser, "#add-user")
    fill(browser, "add-user", name="ui-user", password="ui-secret",
         tags="monitoring, policymaker")
    text_in(browser, "#toast", "User added")
    text_in(browser, "#users-table", "ui-user")
    assert _api(node, "GET", "/users/ui-user")["tags"] == ["monitoring", "policymaker"]
    assert _api(node, "GET", "/whoami", auth=("ui-user", "ui-secret"))["name"] == "ui-user"
    with pytest.raises(pika.exceptions.AMQPConnectionError):  # no permission on "/" yet
        node.connection(user="ui-user", password="ui-secret").close()

    fill(browser, "set-permission", user="ui-user", vhost="/", configure="^ui-user-",
         write=".*", read=".*")
    text_in(browser, "#toast", "Permission set")
    text_in(browser, "#permissions-table", "^ui-user-")
    assert _api(node, "GET", "/permissions/%2F/ui-user") == {
        "user": "ui-user", "vhost": "/", "configure": "^ui-user-", "write": ".*", "read": ".*"}
    with node.connection(user="ui-user", password="ui-secret") as c:
        _second_declare_refused(c, "ui-user-q", "ui-other-q", 403,
                                "ACCESS_REFUSED - access to queue 'ui-other-q' in vhost '/' "
                                "refused for user 'ui-user'")
    # a bad regex is refused with the broker's reason; the permission stays as it was
    fill(browser, "set-permission", user="ui-user", vhost="/", configure="(", write=".*",
         read=".*")
    text_in(browser, "#toast", "invalid regexp")
    assert _api(node, "GET", "/permissions/%2F/ui-user")["configure"] == "^ui-user-"

    # the same form on an existing user updates it, as RabbitMQ's does, and says so
    fill(browser, "add-user", name="ui-user", password="ui-secret-2", tags="monitoring")
    text_in(browser, "#toast", "Updated an existing user: 'ui-user'")
    wait(browser, lambda b: _api(node, "GET", "/users/ui-user")["tags"] == ["monitoring"])
    assert _status(node, "GET", "/whoami", auth=("ui-user", "ui-secret")) == 401
    assert _status(node, "GET", "/whoami", auth=("ui-user", "ui-secret-2")) == 200
    shot(browser, node, "admin-users")

    _click_in_row(browser, "permissions-table", "ui-user", "button")
    _gone(browser, "permissions-table", "ui-user")
    assert _status(node, "GET", "/permissions/%2F/ui-user") == 404
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        node.connection(user="ui-user", password="ui-secret-2").close()
    _click_in_row(browser, "users-table", "ui-user", "button")
    _gone(browser, "users-table", "ui-user")
    assert _status(node, "GET", "/users/ui-user") == 404
    assert _status(node, "GET", "/whoami", auth=("ui-user", "ui-secret-2")) == 401
    _api(node, "DELETE", "/queues/%2F/ui-user-q")


def test_a_virtual_host_its_permission_and_its_queue_limit_from_the_admin_page__R3(node,
                                                                                   browser):
    """Add a virtual host, let guest in, cap its queues with a limit that a client then meets
    (RabbitMQ's refusal), and delete the virtual host."""
    logged_in(browser, node)
    go(browser, node, "#/admin")
    visible(browser, "#add-vhost")
    fill(browser, "add-vhost", name="ui-vhost")
    text_in(browser, "#toast", "Virtual host added")
    text_in(browser, "#vhosts-table", "ui-vhost")
    assert _api(node, "GET", "/vhosts/ui-vhost")["name"] == "ui-vhost"
    fill(browser, "set-permission", user="guest", vhost="ui-vhost", configure=".*",
         write=".*", read=".*")
    text_in(browser, "#permissions-table", "ui-vhost")
    fill(browser, "set-vhost-limit", vhost="ui-vhost", limit="max-queues", value="1")
    text_in(browser, "#vhost-limits-table", "ui-vhost")
    assert _api(node, "GET", "/vhost-limits/ui-vhost") == [{"vhost": "ui-vhost",
                                                            "value": {"max-queues": 1}}]
    shot(browser, node, "admin-vhosts")
    with node.connection(virtual_host="ui-vhost") as c:
        _second_declare_refused(c, "ui-vq1", "ui-vq2", 406,
                                "PRECONDITION_FAILED - cannot declare queue 'ui-vq2': queue "
                                "limit in vhost 'ui-vhost' (1) is reached")
    _click_in_row(browser, "vhosts-table", "ui-vhost", "button")
    _gone(browser, "vhosts-table", "ui-vhost")
    assert _status(node, "GET", "/vhosts/ui-vhost") == 404
    assert "ui-vhost" not in browser.find_element(By.ID, "vhost-limits-table").text
    assert "ui-vhost" not in browser.find_element(By.ID, "permissions-table").text
    assert _api(node, "GET", "/vhost-limits") == []
    assert not [q for q in _api(node, "GET", "/queues") if q["vhost"] == "ui-vhost"]
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        node.connection(virtual_host="ui-vhost").close()


def test_policies_from_the_admin_page_and_rabbitmq_s_error_for_a_bad_definition(node,
                                                                                browser):
    """A policy set in the form applies to a queue a client declares; a definition RabbitMQ
    would refuse shows RabbitMQ's "Validation failed" text, text that is not JSON says so,
    and neither is stored; the Delete button clears the policy."""
    logged_in(browser, node)
    go(browser, node, "#/admin")
    visible(browser, "#add-policy")
    fill(browser, "add-policy", vhost="/", name="ui-pol", pattern="^ui-pol-",
         **{"apply-to": "queues", "definition": '{"max-length": 2}', "priority": "3"})
    text_in(browser, "#toast", "Policy set")
    text_in(browser, "#policies-table", "ui-pol")
    assert _api(node, "GET", "/policies/%2F/ui-pol") == {
        "vhost": "/", "name": "ui-pol", "pattern": "^ui-pol-", "apply-to": "queues",
        "definition": {"max-length": 2}, "priority": 3}
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.queue_declare("ui-pol-q")
        for i in range(4):
            ch.basic_publish("", "ui-pol-q", str(i).encode())
        assert ch.queue_declare("ui-pol-q", passive=True).method.message_count == 2
        assert ch.basic_get("ui-pol-q", auto_ack=True)[2] == b"2"  # (the head was dropped)
        ch.queue_delete("ui-pol-q")

    fill(browser, "add-policy", vhost="/", name="ui-bad", pattern=".*",
         **{"apply-to": "all", "definition": '{"max-lenght": 2}', "priority": "0"})
    text_in(browser, "#toast", "Validation failed")
    text_in(browser, "#toast", '[{<<"max-lenght">>,2}] are not recognised policy settings')
    shot(browser, node, "admin-policy-error")
    fill(browser, "add-policy", vhost="/", name="ui-bad", pattern=".*",
         **{"apply-to": "all", "definition": "{max-length: 2}", "priority": "0"})
    text_in(browser, "#toast", "Definition: not valid JSON")
    assert [p["name"] for p in _api(node, "GET", "/policies")] == ["ui-pol"]
    assert "ui-bad" not in browser.find_element(By.ID, "policies-table").text

    _click_in_row(browser, "policies-table", "ui-pol", "button")
    _gone(browser, "policies-table", "ui-pol")
    assert _api(node, "GET", "/policies") == []


def test_a_shovel_from_the_shovels_page_moves_messages_and_shows_its_status(node, browser):
    """The Shovels page's form sets a shovel parameter; the status table shows it running on
    this node and its messages move; RabbitMQ's validation text shows for a bad value; the
    Delete button clears it."""
    url = f"amqp://guest:guest@127.0.0.1:{node.port}/%2F"
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.queue_declare("ui-shovel-in", durable=True)
        for i in range(5):
            ch.basic_publish("", "ui-shovel-in", str(i).encode())
    logged_in(browser, node)
    go(browser, node, "#/shovels")
    visible(browser, "#add-shovel")
    fill(browser, "add-shovel", vhost="/", name="ui-sh", **{
        "src-uri": url, "src-queue": "ui-shovel-in", "dest-uri": url,
        "dest-queue": "ui-shovel-out", "ack-mode": "on-confirm"})
    text_in(browser, "#toast", "Shovel added")
    text_in(browser, "#shovel-parameters-table", "ui-sh")
    go(browser, node, "#/overview")
    go(browser, node, "#/shovels")
    text_in(browser, "#shovels-table", "running")
    shot(browser, node, "shovels")
    with node.connection() as c:
        ch = c.channel()
        assert ch.queue_declare("ui-shovel-out", passive=True).method.message_count == 5
    fill(browser, "add-shovel", vhost="/", name="ui-bad", **{
        "src-uri": "http://nowhere", "src-queue": "q", "dest-uri": url})
    text_in(browser, "#toast", 'not a valid URI: {{unexpected_uri_scheme,"http"}')
    _click_in_row(browser, "shovel-parameters-table", "ui-sh", "button")
    _gone(browser, "shovel-parameters-table", "ui-sh")
    assert _api(node, "GET", "/parameters/shovel") == []


# --- channels and their connection --------------------------------------------------------------
def test_channels_page_and_closing_a_channel_s_connection_with_a_reason(node, browser):
    """The channels page lists a client's channels (prefetch, confirm mode) as the API does;
    a channel's connection links to the connection's page, which lists its channels and
    closes it with the reason typed (RabbitMQ's "Close this connection"): the client gets 320
    CONNECTION_FORCED with that reason."""
    logged_in(browser, node)
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", node.port, client_properties={"product": "ui-channels"}))
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=7)
        ch.confirm_delivery()
        conn.channel()
        name = wait(browser, lambda b: next(
            (c["name"] for c in _api(node, "GET", "/connections")
             if c["client_properties"].get("product") == "ui-channels"), None))
        first = f"{name} (1)"
        api_ch = wait(browser, lambda b: (lambda c: c if c["prefetch_count"] == 7 else None)(
            _api(node, "GET", "/channels/" + urllib.parse.quote(first, safe=""))))
        assert api_ch["confirm"] is True and api_ch["connection_details"]["name"] == name
        go(browser, node, "#/channels")
        # channel, connection, user, vhost, mode (C: confirm), state, unconfirmed, prefetch
        cells = _cells(browser, "channels-table", first)
        assert cells[:5] == [first, name, "guest", "/", "C"] and cells[7] == "7", cells
        assert _cells(browser, "channels-table", f"{name} (2)")[4] == ""
        _no_toast(browser)  # (an earlier test's message, not this page's)
        shot(browser, node, "channels")
        _click_in_row(browser, "channels-table", first, "a.channel-connection")
        visible(browser, "#close-connection")
        text_in(browser, "#connection-channels", f"{name} (2)")
        text_in(browser, "#connection-details", "client ui-channels")
        shot(browser, node, "connection")
        fill(browser, "close-connection", reason="closed from the UI test")
        text_in(browser, "#toast", "Connection closed")
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as e:
            for _ in range(20):
                conn.process_data_events(time_limit=1)
        assert e.value.reply_code == 320
        assert e.value.reply_text == "CONNECTION_FORCED - closed from the UI test"
        wait(browser, lambda b: b.current_url.endswith("#/connections"))
        wait(browser, lambda b: not [c for c in _api(node, "GET", "/connections")
                                     if c["name"] == name], timeout=30)
        _gone(browser, "connections-table", name)
    finally:
        if conn.is_open:
            conn.close()


# --- the overview's queued-messages chart -------------------------------------------------------
def _chart_series(browser, chart_id: str) -> dict:
    """{dataset label: data} and the labels of a Chart.js chart, as the library holds them."""
    return browser.execute_script(
        "const c = Chart.getChart(arguments[0]); if (!c) { return null; }"
        "return {labels: c.data.labels, title: c.options.plugins.title.text,"
        " data: Object.fromEntries(c.data.datasets.map(d => [d.label, d.data]))};", chart_id)


def _chart_when(browser, chart_id: str, cond, timeout: float = 30):
    """The chart's series once `cond` holds of them (asked again while the page redraws the
    chart: between two draws there is none, which failed a loaded run)."""
    return wait(browser, lambda b: (lambda s: s if s is not None and cond(s) else None)(
        _chart_series(b, chart_id)), timeout)


def test_the_overview_s_queued_messages_chart_plots_published_messages(node, browser):
    """Messages published and then fetched without ack show in the queued-messages chart's
    data (Chart.js' own datasets, not pixels): a point with the ready messages added, then one
    with the unacked ones, each as many as /api/overview counted."""
    logged_in(browser, node)
    go(browser, node, "#/overview")
    wait(browser, lambda b: _chart_series(b, "chart-depth"))
    base = _api(node, "GET", "/overview")["queue_totals"]
    with node.connection() as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.queue_declare("ui-chart-q")
        for _ in range(7):
            ch.basic_publish("", "ui-chart-q", b"charted")
        # (the queue's sample reaches the node within 1 s, the page samples every 5 s)
        s = _chart_when(browser, "chart-depth",
                        lambda s: max(s["data"]["Ready"]) >= base["messages_ready"] + 7)
        assert s["title"] == "Queued messages"
        assert len(s["labels"]) == len(s["data"]["Ready"]) == len(s["data"]["Unacked"])
        for _ in range(3):
            assert ch.basic_get("ui-chart-q", auto_ack=False)[0] is not None
        s = _chart_when(browser, "chart-depth", lambda s: max(s["data"]["Unacked"]) >=
                        base["messages_unacknowledged"] + 3)
        totals = _api(node, "GET", "/overview")["queue_totals"]  # (nothing changed since)
        assert s["data"]["Ready"][-1] == totals["messages_ready"]
        assert s["data"]["Unacked"][-1] == totals["messages_unacknowledged"]
        shot(browser, node, "overview-chart")
        ch.queue_delete("ui-chart-q")


# --- lifecycle traces ---------------------------------------------------------------------------
def _analyze(spark, events: Path, out: Path) -> None:
    """`make analyze`'s job (spark_analysis.lifecycle) on `events`, writing `out`, in the
    tests' shared SparkSession (a JVM of its own would cost the suite its start and warm-up;
    the command line itself runs in test_spark_standalone.py)."""
    from spark_analysis import lifecycle

    args = lifecycle.parse_args(["--events", str(events), "--out", str(out), "--no-progress"])
    assert lifecycle.run(args, spark=spark) == 0


def test_the_traces_page_shows_a_make_analyze_report_and_a_message_s_lifecycle(
        node, browser, tmp_path, spark):
    """Issue 14 item 7: a broker with --events full runs a workload (one message requeued
    then acked), `make analyze`'s Spark job writes its report into the UI node's data
    directory, and the Traces page lists it, its messages, and the message's steps, as the
    API answers them, and opens the job's report."""
    from amqp_helpers import wait_until

    traced = Broker.start_leveret(tmp_path, "--events", "full")
    try:
        with traced.connection() as c:
            ch = c.channel()
            ch.confirm_delivery()
            ch.queue_declare("ui-traced-q")
            for mid in ("ui-traced", "ui-left"):
                ch.basic_publish("", "ui-traced-q", mid.encode(),
                                 pika.BasicProperties(message_id=mid))
            m, props, _ = wait_until(lambda: (lambda g: g if g[0] else None)(
                ch.basic_get("ui-traced-q")), message="a message")
            assert props.message_id == "ui-traced"
            ch.basic_nack(m.delivery_tag, requeue=True)
            got = []
            wait_until(lambda: got.append(ch.basic_get("ui-traced-q")) or got[-1][0],
                       message="the requeued message")
            # (a requeued message goes back to its place at the head)
            assert got[-1][1].message_id == "ui-traced" and got[-1][0].redelivered
            ch.basic_ack(got[-1][0].delivery_tag)
    finally:
        traced.stop()  # its processes flush their events
    _analyze(spark, traced.data_dir / "events", node.data_dir / "ui-analysis")

    logged_in(browser, node)
    go(browser, node, "#/traces")
    assert _cells(browser, "analyses-table", "ui-analysis")[1] == "2"
    assert _http(node, "GET", "/analyses/ui-analysis/report.html")[0] == 200
    assert _http(node, "GET", "/analyses/ui-analysis/report.html", auth=("guest", "x"))[0] \
        == 401
    # the report opens in a tab of its own, plots and all, without asking for the password
    ui_tab = browser.current_window_handle
    _click_in_row(browser, "analyses-table", "ui-analysis", "report.html", By.LINK_TEXT)
    tab = wait(browser, lambda b: next((w for w in b.window_handles if w != ui_tab), None))
    browser.switch_to.window(tab)
    try:
        wait(browser, lambda b: b.title == "Leveret lifecycle report")
        assert "; 2 messages" in browser.find_element(By.TAG_NAME, "body").text
        assert wait(browser, lambda b: b.execute_script(
            "const imgs = [...document.images];"
            "return imgs.length >= 3 && imgs.every(i => i.complete && i.naturalWidth > 0)"))
        shot(browser, node, "traces-report")
    finally:
        browser.close()
        browser.switch_to.window(ui_tab)
    _click_in_row(browser, "analyses-table", "ui-analysis", "ui-analysis", By.LINK_TEXT)
    cells = _cells(browser, "trace-messages", "ui-traced")
    assert cells[2:4] == ["acked", "1"], cells  # final state, redeliveries
    listed = {m["message_id"]: m for m in
              _api(node, "GET", "/leveret/analyses/ui-analysis/messages")}
    assert listed["ui-left"]["final_state"] == "queued"
    shot(browser, node, "traces-messages")
    _click_in_row(browser, "trace-messages", "ui-traced", "a", By.TAG_NAME)  # by its msg_id
    visible(browser, "#trace-steps")
    trace = _api(node, "GET", "/leveret/analyses/ui-analysis/messages/ui-traced")
    assert browser.current_url.endswith("/" + trace["msg_id"])

    def kinds(b):
        return [r.find_elements(By.TAG_NAME, "td")[1].text
                for r in b.find_elements(By.CSS_SELECTOR, "#trace-steps tbody tr")]
    shown = wait(browser, lambda b: kinds(b) or None)
    assert shown == [s["kind"] for s in trace["steps"]]
    assert shown[0] == "publish_received" and shown[-1] == "acked" and "requeued" in shown
    nodes = wait(browser, lambda b: {
        r.find_elements(By.TAG_NAME, "td")[3].text
        for r in b.find_elements(By.CSS_SELECTOR, "#trace-steps tbody tr")} or None)
    assert nodes == {s["node"] for s in trace["steps"]} and "" not in nodes
    # the same path as lanes: a column per node and process, the step in its own lane
    lanes = wait(browser, lambda b: [th.text for th in b.find_elements(
        By.CSS_SELECTOR, "#trace-lanes thead th")][1:] or None)
    assert lanes == list(dict.fromkeys(f"{s['node']} {s['process']}" for s in trace["steps"]))
    lane_rows = [[td.text for td in r.find_elements(By.TAG_NAME, "td")]
                 for r in browser.find_elements(By.CSS_SELECTOR, "#trace-lanes tbody tr")]
    assert [r[1 + lanes.index(f"{s['node']} {s['process']}")].split()[0]
            for r, s in zip(lane_rows, trace["steps"])] == shown
    shot(browser, node, "traces")
    # the analysis' page finds a message by the publisher's message_id too
    go(browser, node, "#/traces/ui-analysis")
    visible(browser, "#find-message")
    fill(browser, "find-message", ref="ui-traced")
    wait(browser, lambda b: b.current_url.endswith("/ui-traced"))
    text_in(browser, "#page h2", "Lifecycle of ui-traced")
    wait(browser, lambda b: kinds(b) == shown)
    # where did my message go: the search finds messages by a key (here the queue they went
    # to), as /api/traces answers, and opens a message's path
    go(browser, node, "#/traces/ui-analysis")
    visible(browser, "#trace-search")
    fill(browser, "trace-search", by="queue", value="ui-traced-q")
    found = _api(node, "GET", "/traces/ui-analysis?queue=ui-traced-q")
    assert [r["msg_id"] for r in found] == [trace["msg_id"], listed["ui-left"]["msg_id"]]

    def rows(b):
        return [[td.text for td in r.find_elements(By.TAG_NAME, "td")]
                for r in b.find_elements(By.CSS_SELECTOR, "#trace-found tbody tr")]
    shown_found = wait(browser, lambda b: rows(b) or None)
    assert [r[0] for r in shown_found] == [r["msg_id"] for r in found]
    assert [r[1] for r in shown_found] == [r["t_first"] for r in found]
    assert shown_found[0][3] == "queue = ui-traced-q"
    fill(browser, "trace-search", by="message_id", value="ui-left")
    wait(browser, lambda b: [r[0] for r in rows(b)] == [listed["ui-left"]["msg_id"]])
    _click_in_row(browser, "trace-found", listed["ui-left"]["msg_id"], "a", By.TAG_NAME)
    wait(browser, lambda b: b.current_url.endswith("/" + listed["ui-left"]["msg_id"]))
    text_in(browser, "#page h2", "Lifecycle of ui-left")
    assert wait(browser, lambda b: kinds(b) or None)[0] == "publish_received"

"""The management web UI in a real headless Chromium (Debian's chromium and chromedriver,
driven by Selenium): log in, see the overview and its charts, declare a queue, publish to it
from the exchange page, get the message back, close a connection, see a resource alarm. The
screenshots are saved in the test's temp folder (and in docs/img/ with
LEVERET_UI_SCREENSHOTS=docs/img)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
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
        row = [r for r in browser.find_elements(By.CSS_SELECTOR, "#connections-table tbody tr")
               if "ui-closable" in r.text][0]
        row.find_element(By.CSS_SELECTOR, "button.close-connection").click()
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


def _api(node, method, path, body=None):
    import base64
    import urllib.request
    req = urllib.request.Request(f"http://127.0.0.1:{node.http_port}/api{path}",
                                 data=None if body is None else json.dumps(body).encode(),
                                 method=method)
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=20) as r:
        raw = r.read()
        return json.loads(raw) if raw else None


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
    text_in(browser, "#toast", "the value must be an integer")
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
        row = [r for r in browser.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr")][0]
        row.find_element(By.TAG_NAME, "button").click()
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
    def unbind(b):  # (asked again if the table re-rendered under the row found)
        row = [r for r in b.find_elements(By.CSS_SELECTOR, "#queue-bindings tbody tr")
               if "ui.#" in r.text][0]
        row.find_element(By.TAG_NAME, "button").click()
        return True
    wait(browser, unbind)
    wait(browser, lambda b: "ui.#" not in b.find_element(By.ID, "queue-bindings").text)
    assert _api(node, "GET", "/bindings/%2F/e/amq.topic/q/ui-ops-q") == []
    shot(browser, node, "queue-ops")
    browser.find_element(By.ID, "delete-queue").click()
    wait(browser, lambda b: b.current_url.endswith("#/queues"))
    assert "ui-ops-q" not in {q["name"] for q in _api(node, "GET", "/queues")}

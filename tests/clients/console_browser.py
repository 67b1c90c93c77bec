"""Drives mcpgw's web console in a real browser: Debian's headless Chromium through Selenium
and Debian's chromedriver, as a person would, and reports what each page showed.

    .peers/venv/bin/python tests/clients/console_browser.py BASE_URL TOKEN OUT_DIR \
        [--link URL | --sign-in-form [--wrong-secret SECRET]] [--every-page] \
        [--search QUERY] [--reject MATCH [--reason TEXT]] [--approve MATCH [--edit-arguments JSON]] \
        [--add-server NAME COMMAND] [--toggle-server NAME] [--test-server NAME] \
        [--oauth-sign-in SERVER [--expect-tool TOOL]] [--oauth-sign-out SERVER] \
        [--add-client NAME] [--remove-client NAME] [--trust-held TOOL] [--sign-out]

Signs in by opening BASE_URL/ui?token=TOKEN (the link `mcpgw serve` prints), or the link URL
exactly as given with --link; with --sign-in-form it opens BASE_URL/ui/tools instead, follows
the redirect to the login page, types TOKEN (an admin token or an administrator's key) into its
form (first WRONG-SECRET with --wrong-secret, reading the refusal) and presses Sign in. Then every
page: servers, tools, search (with QUERY), audit; --every-page adds the first server's page, the
sign-ins page and the clients page. With --add-server it fills in the servers page's "Add a
server" form (a stdio server NAME running COMMAND), reads the note the answer shows, and opens
the new server's page to read its tools; with --toggle-server it presses Disable on NAME's page,
reads its state and tools, then presses Enable and reads them again; with --test-server it
opens NAME's page, presses Test and reads the report or the error. With --reject it waits (up
to 60 s) on the approvals page for a pending call whose tool or arguments contain MATCH, types
REASON and presses Reject; with --approve likewise, replacing the arguments in the card's text
box with JSON first when --edit-arguments is given, and presses Approve. With --oauth-sign-in it presses
SERVER's Sign in button on the sign-ins page and follows the browser through the authorization
server (whatever it shows; the test fixture approves at once) back to the console, reads the
sign-ins there, and with --expect-tool waits (up to 30 s) for TOOL on the tools page; with
--oauth-sign-out it presses Sign out on SERVER's row and reads the note. With --add-client it
fills in the clients page's form, reads the key shown once (the screenshot of that page has the
key blanked out), then opens the page again and says whether the key is still anywhere in it;
with --remove-client it presses NAME's Remove button and reads the note. With --trust-held it
reads TOOL's held definition on the approvals page (the fields that changed and the diff), then
presses its "Trust the new definition" button and reads the note. With --sign-out, last, it
presses Sign out in the menu, reads where the browser landed, puts the old session cookie back
and opens the tools page again (a session that ended must not come back). A screenshot of each page goes to
OUT_DIR/<page>.png. Prints one JSON object: the landing URL, the session cookie's flags, and
per page its title and what it listed. Exit 0 when the tour ran (the test judges the report),
1 when the browser failed.
"""

import argparse
import json
import sys
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def browser() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def texts(driver, selector: str) -> list[str]:
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, selector)]


def visit(driver, out: Path, base: str, path: str, name: str) -> dict:
    driver.get(base + path)
    screenshot(driver, out / f"{name}.png")
    return {"title": driver.title, "url": driver.current_url}


def screenshot(driver, path: Path) -> None:
    """Saves the page; once more when a navigation still under way (a page that was just left
    may still be unloading) aborted the first try."""
    try:
        driver.save_screenshot(str(path))
    except WebDriverException:
        WebDriverWait(driver, 30, ignored_exceptions=(WebDriverException,)).until(
            lambda d: d.execute_script("return document.readyState") == "complete"
        )
        driver.save_screenshot(str(path))


def tour(driver, args) -> dict:
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {}
    if args.sign_in_form:
        report["sign_in_form"] = sign_in_form(driver, args, out)
        servers = visit(driver, out, args.base, "/ui", "servers")
    else:
        link = args.link or f"{args.base}/ui?token={args.token}"
        servers = visit(driver, out, "", link, "servers")
    servers["rows"] = texts(driver, "table tr")[1:]
    report["landing"] = driver.current_url
    cookie = driver.get_cookie("mcpgw_console") or {}
    report["cookie"] = {k: cookie.get(k) for k in ("httpOnly", "sameSite", "path")}
    report["servers"] = servers
    if args.add_server:
        report["add_server"] = add_server(driver, args, out)
    if args.toggle_server:
        report["toggle_server"] = toggle_server(driver, args, out)
    if args.test_server:
        report["test_server"] = test_server(driver, args, out)
    if args.oauth_sign_in:
        report["oauth_sign_in"] = oauth_sign_in(driver, args, out)
    if args.oauth_sign_out:
        report["oauth_sign_out"] = oauth_sign_out(driver, args, out)
    if args.add_client:
        report["add_client"] = add_client(driver, args, out)
    if args.remove_client:
        report["remove_client"] = remove_client(driver, args, out)
    tools = visit(driver, out, args.base, "/ui/tools", "tools")
    tools["names"] = texts(driver, "td.name")
    report["tools"] = tools
    if args.search:
        driver.get(args.base + "/ui/search")
        box = driver.find_element(By.NAME, "q")
        box.send_keys(args.search)
        box.submit()
        time.sleep(0.5)
        driver.save_screenshot(str(out / "search.png"))
        report["search"] = {
            "title": driver.title,
            "lists": {
                section.get_attribute("id"): [e.text for e in section.find_elements(By.CSS_SELECTOR, "li .name")]
                for section in driver.find_elements(By.CSS_SELECTOR, "section.list")
            },
        }
    if args.reject:
        report["rejection"] = decide(driver, args, out, args.reject, "reject")
    if args.approve:
        report["approval"] = decide(driver, args, out, args.approve, "approve")
    if args.trust_held:
        report["held"] = trust_held(driver, args, out)
    audit = visit(driver, out, args.base, "/ui/audit", "audit")
    audit["rows"] = texts(driver, "table tr")[1:]
    report["audit"] = audit
    if args.every_page:
        report["pages"] = every_page(driver, args, out)
    if args.sign_out:
        report["sign_out"] = sign_out(driver, args, out)
    return report


def sign_in_form(driver, args, out: Path) -> dict:
    driver.get(args.base + "/ui/tools")
    report = {"redirected_to": driver.current_url}
    driver.save_screenshot(str(out / "login.png"))
    if args.wrong_secret:
        submit_secret(driver, args.wrong_secret)
        driver.save_screenshot(str(out / "login-refused.png"))
        report["refused"] = {"url": driver.current_url, "why": texts(driver, "p.why")}
    submit_secret(driver, args.token)
    report["landed"] = driver.current_url
    report["title"] = driver.title
    return report


def submit_secret(driver, secret: str) -> None:
    box = driver.find_element(By.NAME, "secret")
    box.clear()
    box.send_keys(secret)
    click_to_next_page(driver, driver.find_element(By.CSS_SELECTOR, "form[action='/ui/login'] button"))


def every_page(driver, args, out: Path) -> dict:
    pages = {}
    driver.get(args.base + "/ui")
    links = [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "#servers a")]
    if links:
        driver.get(links[0])
        driver.save_screenshot(str(out / "server.png"))
        pages["server"] = {"url": driver.current_url, "tools": texts(driver, "#tools td.name")}
    for path, name in (("/ui/connections", "connections"), ("/ui/clients", "clients")):
        page = visit(driver, out, args.base, path, name)
        page["headings"] = texts(driver, "h1, h2")
        pages[name] = page
    return pages


def sign_out(driver, args, out: Path) -> dict:
    driver.get(args.base + "/ui/tools")
    old = driver.get_cookie("mcpgw_console")
    click_to_next_page(driver, driver.find_element(By.CSS_SELECTOR, "nav form[action='/ui/logout'] button"))
    driver.save_screenshot(str(out / "signed-out.png"))
    report = {"landed": driver.current_url, "cookie_left": driver.get_cookie("mcpgw_console") is not None}
    # The old session's cookie, put back: the gateway must have ended the session itself.
    if old:
        driver.add_cookie({"name": old["name"], "value": old["value"], "path": old.get("path", "/ui")})
    driver.get(args.base + "/ui/tools")
    report["with_the_old_cookie"] = driver.current_url
    return report


def add_server(driver, args, out: Path) -> dict:
    name, command = args.add_server
    driver.get(args.base + "/ui")
    form = driver.find_element(By.ID, "add-server")
    form.find_element(By.NAME, "name").send_keys(name)
    form.find_element(By.NAME, "command").send_keys(command)
    driver.save_screenshot(str(out / "server-add-form.png"))
    form.find_element(By.TAG_NAME, "button").click()
    # The answer is the servers page again, with a note saying what happened.
    WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.ID, "note"))
    driver.save_screenshot(str(out / "server-added.png"))
    note = driver.find_element(By.ID, "note").text
    rows = texts(driver, "#servers tr")[1:]
    driver.find_element(By.CSS_SELECTOR, f'#servers a[href="/ui/servers/{name}"]').click()
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "tools"))
    driver.save_screenshot(str(out / "server.png"))
    return {
        "note": note,
        "rows": rows,
        "page": driver.current_url,
        "state": driver.find_element(By.CSS_SELECTOR, "#server td.state").text,
        "tools": texts(driver, "#tools td.name"),
    }


def click_to_next_page(driver, button) -> None:
    """Presses a form's button and waits until the page it answers with has replaced this one
    (a wait for an element alone could find it on the old page)."""
    # A mark on this page's window: the answer's page is a new window object without it.
    # (Asking the old page's element whether it went stale raced the navigation: Chromium may
    # answer "Node with given id does not belong to the document" instead of a stale element.)
    driver.execute_script("window.__mcpgwOldPage = true")
    button.click()
    # A script run while the old page unloads may fail: asked again until the new one answers.
    WebDriverWait(driver, 60, ignored_exceptions=(WebDriverException,)).until(
        lambda d: d.execute_script(
            "return window.__mcpgwOldPage === undefined && document.readyState === 'complete'"
        )
    )


def server_state(driver) -> dict:
    return {
        "notes": texts(driver, "#note"),
        "state": driver.find_element(By.CSS_SELECTOR, "#server td.state").text,
        "tools": texts(driver, "#tools td.name"),
        "buttons": texts(driver, ".buttons button"),
    }


def toggle_server(driver, args, out: Path) -> dict:
    name = args.toggle_server
    driver.get(f"{args.base}/ui/servers/{name}")
    before = server_state(driver)
    click_to_next_page(driver, driver.find_element(By.CSS_SELECTOR, "button.disable"))
    driver.save_screenshot(str(out / "server-disabled.png"))
    disabled = server_state(driver)
    click_to_next_page(driver, driver.find_element(By.CSS_SELECTOR, "button.enable"))
    driver.save_screenshot(str(out / "server-enabled.png"))
    enabled = server_state(driver)
    driver.get(args.base + "/ui/tools")
    return {"before": before, "disabled": disabled, "enabled": enabled, "catalog": texts(driver, "td.name")}


def test_server(driver, args, out: Path) -> dict:
    driver.get(f"{args.base}/ui/servers/{args.test_server}")
    driver.find_element(By.CSS_SELECTOR, "button.test").click()
    WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.ID, "test"))
    driver.save_screenshot(str(out / "server-test.png"))
    test = driver.find_element(By.ID, "test")
    errors = texts(driver, "#test-error")
    return {
        "ok": "ok" in (test.get_attribute("class") or "").split(),
        "text": test.text,
        "error": errors[0] if errors else None,
    }


def connections(driver) -> dict:
    return {
        "servers": {
            row.get_attribute("id"): row.find_element(By.CSS_SELECTOR, "td.status").text
            for row in driver.find_elements(By.CSS_SELECTOR, "#oauth-servers tr[id]")
        },
        "connections": [
            {
                "server": row.find_element(By.CSS_SELECTOR, "td.name").text,
                "principal": row.find_element(By.CSS_SELECTOR, "td.principal").text,
                "status": row.find_element(By.CSS_SELECTOR, "td.status").text,
            }
            for row in driver.find_elements(By.CSS_SELECTOR, "#connections tr")[1:]
        ],
        "notes": texts(driver, "#note"),
    }


def oauth_sign_in(driver, args, out: Path) -> dict:
    server = args.oauth_sign_in
    driver.get(args.base + "/ui/connections")
    before = connections(driver)
    driver.save_screenshot(str(out / "connections.png"))
    driver.find_element(By.CSS_SELECTOR, f"#oauth-{server} button.signin").click()
    # Through the authorization server and the gateway's callback, back to the console.
    visited = []
    deadline = time.time() + 60
    while time.time() < deadline:
        url = driver.current_url
        if not visited or visited[-1] != url:
            visited.append(url)
        if url.endswith("/ui/connections") and driver.find_elements(By.ID, "oauth-servers"):
            break
        time.sleep(0.1)
    WebDriverWait(driver, 10).until(lambda d: d.find_elements(By.ID, "oauth-servers"))
    driver.save_screenshot(str(out / "connections-signed-in.png"))
    report = {"before": before, "after": connections(driver), "landed": driver.current_url, "visited": visited}
    if args.expect_tool:
        deadline = time.time() + 30
        names: list[str] = []
        while time.time() < deadline:
            driver.get(args.base + "/ui/tools")
            names = texts(driver, "td.name")
            if args.expect_tool in names:
                break
            time.sleep(0.5)
        report["tools"] = names
    return report


def oauth_sign_out(driver, args, out: Path) -> dict:
    server = args.oauth_sign_out
    driver.get(args.base + "/ui/connections")
    rows = [
        row
        for row in driver.find_elements(By.CSS_SELECTOR, "#connections tr")[1:]
        if row.find_element(By.CSS_SELECTOR, "td.name").text == server
    ]
    if not rows:
        return {"found": False, **connections(driver)}
    rows[0].find_element(By.CSS_SELECTOR, "button.signout").click()
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "note"))
    driver.save_screenshot(str(out / "connections-signed-out.png"))
    return {"found": True, **connections(driver)}


def clients(driver) -> list[str]:
    return texts(driver, "#clients td.name")


def add_client(driver, args, out: Path) -> dict:
    driver.get(args.base + "/ui/clients")
    before = clients(driver)
    form = driver.find_element(By.ID, "add-client")
    form.find_element(By.NAME, "name").send_keys(args.add_client)
    form.find_element(By.TAG_NAME, "button").click()
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "new-key") or d.find_elements(By.ID, "note"))
    keys = texts(driver, "#new-key #key")
    key = keys[0] if keys else None
    after = clients(driver)
    # The artefact shows the page, not the key.
    driver.execute_script("for (const k of document.querySelectorAll('#key')) k.textContent = 'mcpgw_(blanked out in this screenshot)';")
    driver.save_screenshot(str(out / "clients-added.png"))
    # Opened again: the key is not on the page any more.
    driver.get(args.base + "/ui/clients")
    driver.save_screenshot(str(out / "clients.png"))
    source = driver.page_source
    return {
        "key": key,
        "notes": texts(driver, "#note"),
        "before": before,
        "after": after,
        "reopened": clients(driver),
        "key_shown_again": bool(key) and key in source,
        "new_key_box_again": bool(driver.find_elements(By.ID, "new-key")),
        "profiles": {
            section.get_attribute("id"): texts(section, "ul.tools li")
            for section in driver.find_elements(By.CSS_SELECTOR, "section.profile")
        },
    }


def remove_client(driver, args, out: Path) -> dict:
    driver.get(args.base + "/ui/clients")
    driver.find_element(By.CSS_SELECTOR, f"#client-{args.remove_client} button.remove").click()
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "note"))
    driver.save_screenshot(str(out / "clients-removed.png"))
    return {"note": " ".join(texts(driver, "#note")), "clients": clients(driver)}


def decide(driver, args, out: Path, match: str, verdict: str) -> dict:
    """Presses Approve or Reject on the first waiting call whose card or arguments hold MATCH."""
    deadline = time.time() + 60
    while time.time() < deadline:
        driver.get(args.base + "/ui/approvals")
        cards = [
            c
            for c in driver.find_elements(By.CSS_SELECTOR, "div.approval")
            if match in c.text or match in (c.find_element(By.NAME, "arguments").get_property("value") or "")
        ]
        if cards:
            card = cards[0]
            # The page as the first decision found it (with --reject and --approve, both waiting).
            if not getattr(args, "approvals_shot", False):
                driver.save_screenshot(str(out / "approvals.png"))
                args.approvals_shot = True
            if verdict == "approve" and args.edit_arguments is not None:
                box = card.find_element(By.NAME, "arguments")
                box.clear()
                box.send_keys(args.edit_arguments)
                driver.save_screenshot(str(out / "approvals-edited.png"))
            if verdict == "reject" and args.reason:
                card.find_element(By.NAME, "reason").send_keys(args.reason)
            # The form's answer is the approvals page again, with a note saying what happened.
            click_to_next_page(driver, card.find_element(By.CSS_SELECTOR, f"button.{verdict}"))
            decided = {"approve": "approved", "reject": "rejected"}[verdict]
            driver.save_screenshot(str(out / f"approvals-{decided}.png"))
            return {
                "found": True,
                "note": " ".join(texts(driver, "p.note")),
                "still_waiting": len(driver.find_elements(By.CSS_SELECTOR, "div.approval")),
            }
        time.sleep(0.5)
    driver.save_screenshot(str(out / "approvals.png"))
    return {"found": False, "note": ""}


def trust_held(driver, args, out: Path) -> dict:
    driver.get(args.base + "/ui/approvals")
    forms = [f for f in driver.find_elements(By.CSS_SELECTOR, "form.held") if args.trust_held in f.text]
    driver.save_screenshot(str(out / "held.png"))
    if not forms:
        return {"found": False}
    held = {
        "found": True,
        "summary": forms[0].find_element(By.CSS_SELECTOR, "p").text,
        "diff": forms[0].find_element(By.CSS_SELECTOR, "pre.diff").text,
    }
    forms[0].find_element(By.CSS_SELECTOR, "button").click()
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "p.note"))
    driver.save_screenshot(str(out / "held-trusted.png"))
    held["note"] = " ".join(texts(driver, "p.note"))
    held["still_held"] = any(args.trust_held in f.text for f in driver.find_elements(By.CSS_SELECTOR, "form.held"))
    return held


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("base")
    parser.add_argument("token")
    parser.add_argument("out_dir")
    parser.add_argument("--link", metavar="URL")
    parser.add_argument("--sign-in-form", action="store_true")
    parser.add_argument("--wrong-secret", metavar="SECRET")
    parser.add_argument("--every-page", action="store_true")
    parser.add_argument("--sign-out", action="store_true")
    parser.add_argument("--search")
    parser.add_argument("--approve", metavar="MATCH")
    parser.add_argument("--edit-arguments", metavar="JSON")
    parser.add_argument("--reject", metavar="MATCH")
    parser.add_argument("--reason")
    parser.add_argument("--toggle-server", metavar="NAME")
    parser.add_argument("--add-server", nargs=2, metavar=("NAME", "COMMAND"))
    parser.add_argument("--test-server", metavar="NAME")
    parser.add_argument("--oauth-sign-in", metavar="SERVER")
    parser.add_argument("--expect-tool", metavar="TOOL")
    parser.add_argument("--oauth-sign-out", metavar="SERVER")
    parser.add_argument("--add-client", metavar="NAME")
    parser.add_argument("--remove-client", metavar="NAME")
    parser.add_argument("--trust-held", metavar="TOOL")
    args = parser.parse_args()
    try:
        driver = browser()
    except Exception as error:  # noqa: BLE001 - say why the browser did not start
        print(f"could not start Chromium: {error}", file=sys.stderr)
        return 1
    try:
        print(json.dumps(tour(driver, args)))
        return 0
    finally:
        driver.quit()


if __name__ == "__main__":
    sys.exit(main())

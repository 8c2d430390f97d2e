"""The playground in a real browser: headless Chromium (Debian's chromium + chromium-driver) driven by Selenium.

Loads the page, breaks the policy and sees the lint error at its line, fixes it, runs, reads the
placements and the heatmap, then restores the state from a shared link. `make test` installs chromium
with apt-get when missing; without it this test fails (it never skips).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from policyd.commands.playground import server
from policyd.playground.server import PlaygroundServer

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1500,1100",
)
WAIT = 60.0


def browser(user_data: Path) -> webdriver.Chrome:
    """Headless Chromium with a fresh profile; fails with a clear message when it is not installed."""
    for binary in (CHROMIUM, CHROMEDRIVER):
        if not Path(binary).exists() and shutil.which(Path(binary).name) is None:
            pytest.fail(
                f"{binary} not found: apt-get install -y chromium chromium-driver (make test does it)"
            )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM if Path(CHROMIUM).exists() else str(shutil.which("chromium"))
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={user_data}")
    driver_path = CHROMEDRIVER if Path(CHROMEDRIVER).exists() else str(shutil.which("chromedriver"))
    return webdriver.Chrome(options=options, service=Service(driver_path))


@pytest.fixture
def playground() -> Iterator[PlaygroundServer]:
    """The playground on a free loopback port."""
    served = server("127.0.0.1", 0)
    served.start()
    yield served
    served.stop()


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    """A browser, quit after the test."""
    chrome = browser(tmp_path / "chromium-profile")
    yield chrome
    chrome.quit()


def body_state(driver: webdriver.Chrome, key: str) -> str:
    """A `data-*` state the page sets on <body> (ready, lint, run)."""
    return str(driver.execute_script(f"return document.body.dataset.{key} || ''"))


def wait_for(driver: webdriver.Chrome, key: str, *values: str) -> str:
    """Wait until `data-<key>` on <body> is one of `values`; the value."""
    WebDriverWait(driver, WAIT).until(lambda d: body_state(d, key) in values)
    return body_state(driver, key)


def set_text(driver: webdriver.Chrome, text: str, editor: str = "policy-editor") -> None:
    """Replace an editor's text as typing would (an `input` event: the policy is linted after a pause)."""
    area = driver.find_element(By.CSS_SELECTOR, f"#{editor} textarea")
    driver.execute_script(
        "arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input'));", area, text
    )


def run_once(driver: webdriver.Chrome) -> str:
    """Click Run and wait for the run to end; `done` or `failed`."""
    driver.execute_script("document.body.dataset.run = ''")
    driver.find_element(By.ID, "run").click()
    return wait_for(driver, "run", "done", "failed")


def test_edit_lint_fix_run_heatmap_and_share(
    playground: PlaygroundServer, driver: webdriver.Chrome, tmp_path: Path
) -> None:
    driver.get(playground.url)
    wait_for(driver, "ready", "true")
    assert wait_for(driver, "lint", "clean", "errors") == "clean"
    area = driver.find_element(By.CSS_SELECTOR, "#policy-editor textarea")
    original = str(area.get_attribute("value"))
    assert original.startswith("#") and "policy default" in original  # the shipped default.policy

    # break one reference: the error shows at that line in the gutter, as a mark, and in the list
    lines = original.split("\n")
    broken_line = next(
        i for i, line in enumerate(lines) if "node." in line and not line.lstrip().startswith("#")
    )
    column = lines[broken_line].index("node.") + 1
    lines[broken_line] = lines[broken_line].replace("node.", "nodee.", 1)
    area.click()
    set_text(driver, "\n".join(lines))
    assert wait_for(driver, "lint", "errors") == "errors"
    marked = driver.find_elements(By.CSS_SELECTOR, "#policy-editor .gutter .line.error")
    assert [m.get_attribute("data-line") for m in marked] == [str(broken_line + 1)]
    assert "nodee" in str(marked[0].get_attribute("title"))
    mark = driver.find_element(By.CSS_SELECTOR, "#policy-editor .backdrop mark")
    assert mark.get_attribute("textContent").startswith("nodee")
    listed = driver.find_element(By.CSS_SELECTOR, "#policy-diagnostics li.error").text
    assert listed.startswith(f"default.policy:{broken_line + 1}:{column}: error:")
    assert "nodee" in listed

    # a run with the error is refused with the same diagnostics
    driver.find_element(By.ID, "run").click()
    assert wait_for(driver, "run", "failed", "done") == "failed"
    assert "the policy has errors" in driver.find_element(By.ID, "status").text

    # fix it: the marks go away
    set_text(driver, original)
    assert wait_for(driver, "lint", "clean") == "clean"
    assert not driver.find_elements(By.CSS_SELECTOR, "#policy-editor .gutter .line.error")
    assert not driver.find_elements(By.CSS_SELECTOR, "#policy-editor .backdrop mark")

    # run: the placements, and the heatmap of the pod simulate --explain shows (first unschedulable)
    assert run_once(driver) == "done"
    rows = driver.find_elements(By.CSS_SELECTOR, "#placements tbody tr")
    placed = {r.get_attribute("data-pod"): r.find_elements(By.TAG_NAME, "td")[1].text for r in rows}
    assert placed["shop/web-7c9f8d6b5-fghij"] == "node-b1"
    assert placed["ml/model-train"] == "gpu-c1"
    assert placed["shop/analytics-olap"] == "<none>"
    selected = driver.find_element(By.CSS_SELECTOR, "#placements tbody tr.selected").get_attribute("data-pod")
    assert selected == "shop/analytics-olap"
    failed = driver.find_element(By.ID, "failed-scheduling").text
    assert failed.startswith("FailedScheduling: 0/6 nodes are available:") and "Insufficient cpu" in failed
    nodes = [
        th.get_attribute("data-node") for th in driver.find_elements(By.CSS_SELECTOR, "#heatmap thead th")[1:]
    ]
    assert len(nodes) == 6 and "gpu-c1" in nodes
    fit = driver.find_elements(By.CSS_SELECTOR, "#heatmap tr[data-rule='default/NodeResourcesFit'] td.cell")
    verdicts = [c.get_attribute("data-verdict") for c in fit]
    assert len(verdicts) == 6 and "fail" in verdicts and set(verdicts) <= {"pass", "fail", "-"}
    failing = next(c for c in fit if c.get_attribute("data-verdict") == "fail")
    assert "Insufficient" in str(failing.get_attribute("title"))

    # select a placed pod: its column is the chosen one and its score cells carry weighted scores
    driver.execute_script("document.body.dataset.run = ''")
    driver.find_element(By.CSS_SELECTOR, "#placements tbody tr[data-pod='shop/web-7c9f8d6b5-fghij']").click()
    assert wait_for(driver, "run", "done", "failed") == "done"
    chosen = driver.find_element(By.CSS_SELECTOR, "#heatmap thead th.chosen").get_attribute("data-node")
    assert chosen == "node-b1"
    scores = driver.find_elements(
        By.CSS_SELECTOR, "#heatmap tr[data-kind='score'] td.cell[data-verdict='score']"
    )
    assert scores and all(c.text.lstrip("-").isdigit() for c in scores)
    assert "weighted" in str(scores[0].get_attribute("title"))
    totals = driver.find_elements(By.CSS_SELECTOR, "#heatmap tr[data-rule='TOTAL'] td.cell")
    by_node = {c.get_attribute("data-node"): c.text for c in totals}
    best = max((int(v) for v in by_node.values() if v), default=None)
    assert by_node["node-b1"] == str(best)
    driver.save_screenshot(str(tmp_path / "playground.png"))
    assert (tmp_path / "playground.png").stat().st_size > 10_000

    # share: the link restores the policy, the cluster and the selected pod in a fresh page
    driver.find_element(By.ID, "share").click()
    WebDriverWait(driver, WAIT).until(lambda d: "#s=" in d.current_url)
    link = driver.current_url
    driver.get("about:blank")
    driver.get(link)
    wait_for(driver, "ready", "true")
    assert wait_for(driver, "run", "done", "failed") == "done"
    area = driver.find_element(By.CSS_SELECTOR, "#policy-editor textarea")
    assert area.get_attribute("value") == original
    selected = driver.find_element(By.CSS_SELECTOR, "#placements tbody tr.selected").get_attribute("data-pod")
    assert selected == "shop/web-7c9f8d6b5-fghij"


def test_a_score_that_failed_on_a_node_is_marked_in_the_heatmap(
    playground: PlaygroundServer, driver: webdriver.Chrome
) -> None:
    driver.get(playground.url)
    wait_for(driver, "ready", "true")
    area = driver.find_element(By.CSS_SELECTOR, "#policy-editor textarea")
    missing = 'policy default {\n  score Missing { expr = node.free["example.com/none"] }'
    set_text(driver, str(area.get_attribute("value")).replace("policy default {", missing, 1))
    assert wait_for(driver, "lint", "clean", "errors") == "clean"
    assert run_once(driver) == "done"
    driver.execute_script("document.body.dataset.run = ''")
    driver.find_element(By.CSS_SELECTOR, "#placements tbody tr[data-pod='shop/web-7c9f8d6b5-fghij']").click()
    assert wait_for(driver, "run", "done", "failed") == "done"
    cells = driver.find_elements(
        By.CSS_SELECTOR, "#heatmap tr[data-rule='default/Missing'] td.cell[data-verdict='score']"
    )
    assert cells and all(c.text == "0 ERROR" for c in cells)
    title = str(cells[0].get_attribute("title"))
    assert title.endswith("evaluation failed (scored 0): no such key: example.com/none")
    others = driver.find_elements(
        By.CSS_SELECTOR, "#heatmap tr[data-kind='score'] td.cell[data-verdict='score']"
    )
    assert all(c.text.lstrip("-").isdigit() for c in others if c not in cells)


def test_a_cluster_problem_with_no_place_is_listed_without_one_and_marks_no_line(
    playground: PlaygroundServer, driver: webdriver.Chrome
) -> None:
    driver.get(playground.url)
    wait_for(driver, "ready", "true")
    set_text(driver, '{"a": ' * 70 + "1" + "}" * 70, editor="cluster-editor")
    assert run_once(driver) == "failed"
    listed = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#cluster-diagnostics li.error")]
    assert listed == ["cluster.yaml: error: invalid JSON: nested more than 64 levels deep"]
    assert not driver.find_elements(By.CSS_SELECTOR, "#cluster-editor .line.error")

// Drives VS Code's workbench, served by code-server, in headless Chromium (playwright-core, the
// system's Chromium): opens a file and, per phase of the plan, (optionally) rewrites the user
// settings and waits for the extension to restart, inserts text at the end of the file, waits for
// specd's ghost text, screenshots it, accepts it with Tab and saves. Usage:
//   node e2e.js URL PLAN_JSON OUT_DIR
// PLAN_JSON: {"settingsPath": abs path, "phases": [{"name", "file": abs path, "typed", "settings"?,
// "toggle"?, "command"?, "degraded"?}]}; "degraded" (with "settings"): only wait for the warning
// state and record the popups; "command" is run from the command palette first; a phase with "toggle" clicks the status bar item first (suggestions off), inserts,
// waits and records what shows (nothing should), without Tab.
// Writes OUT_DIR/result.json ({steps, phases: [{name, ghost, status, before, saved}], error?}) and
// OUT_DIR/<phase>.png; the caller (tests/test_vscode.py) checks the saved texts.
"use strict";
const fs = require("fs");
const path = require("path");
const { chromium } = require("playwright-core");

const [url, planPath, outDir] = process.argv.slice(2);
const plan = JSON.parse(fs.readFileSync(planPath, "utf8"));
const CHROMIUM = process.env.SPECD_CHROMIUM || "/usr/bin/chromium";
const LIMIT_MS = Number(process.env.SPECD_E2E_WAIT_MS || 240000); // a bound for a loaded 2-core machine
const GHOST = ".monaco-editor .ghost-text-decoration, .monaco-editor .ghost-text";
const steps = [];
const t0 = Date.now();
function step(name) {
  steps.push({ name, s: (Date.now() - t0) / 1000 });
  console.error(`[e2e ${((Date.now() - t0) / 1000).toFixed(1)} s] ${name}`);
}

// the extension's status bar item: its element's id is VS Code's (prefixed with the extension's),
// so it is found by its text, "specd" after the state's icon
async function statusText(page) {
  return page.evaluate(() => {
    const item = [...document.querySelectorAll(".statusbar-item")]
      .find((e) => /(^|\.)specd\.status$/.test(e.id) || /^specd\b/.test((e.textContent || "").trim()));
    if (!item) return null;
    const icon = item.querySelector(".codicon");
    const kind = icon ? [...icon.classList].find((c) => c.startsWith("codicon-") && c !== "codicon-modifier-spin") : "";
    return `${kind || ""} ${(item.textContent || "").trim()}`.trim();
  });
}

// the notification popups on screen (the extension must show none)
async function toasts(page) {
  return page.evaluate(() => [...document.querySelectorAll(".notifications-toasts .notification-toast")]
    .map((e) => (e.textContent || "").trim()));
}

// ready, and (fresh: after a restart) no latency shown yet
async function waitReady(page, fresh) {
  await page.waitForFunction((fresh) => {
    const item = [...document.querySelectorAll(".statusbar-item")]
      .find((e) => /(^|\.)specd\.status$/.test(e.id) || /^specd\b/.test((e.textContent || "").trim()));
    return item && item.querySelector(".codicon-check") && (!fresh || !/ ms/.test(item.textContent || ""));
  }, fresh, { timeout: LIMIT_MS, polling: 250 });
}

async function main() {
  fs.mkdirSync(outDir, { recursive: true });
  const result = { steps, phases: [] };
  const browser = await chromium.launch({
    executablePath: CHROMIUM, headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1000, height: 520 } });
    page.on("console", (m) => { if (m.type() === "error") console.error(`[browser] ${m.text()}`); });
    step(`open ${url}`);
    await page.goto(url, { waitUntil: "domcontentloaded", timeout: LIMIT_MS });
    await page.waitForSelector(".monaco-workbench", { timeout: LIMIT_MS });
    step("workbench shown");
    await waitReady(page, false); // the extension activates on startup and starts `specd lsp`
    step(`status: ${await statusText(page)}`);
    for (const phase of plan.phases) {
      const record = { name: phase.name };
      result.phases.push(record);
      if (phase.settings) {
        fs.writeFileSync(plan.settingsPath, JSON.stringify(phase.settings, null, 2));
        step(`${phase.name}: settings written`);
        // the extension restarts `specd lsp` when its settings change; code-server's watcher on the
        // settings file may take its time to notice, so the window is reloaded (as a user would after
        // editing settings.json by hand): the extension starts again with the new settings
        await page.reload({ waitUntil: "domcontentloaded", timeout: LIMIT_MS });
        await page.waitForSelector(".monaco-workbench", { timeout: LIMIT_MS });
        if (phase.degraded) { // the extension cannot start `specd lsp`: a warning, and no popup
          await page.waitForFunction(() => [...document.querySelectorAll(".statusbar-item")]
            .some((e) => /^specd/.test((e.textContent || "").trim()) && e.querySelector(".codicon-warning")),
                                     null, { timeout: LIMIT_MS, polling: 250 });
          await page.waitForTimeout(3000); // time for a popup to show, were there one
          record.status = await statusText(page);
          record.toasts = await toasts(page);
          step(`${phase.name}: status ${record.status}; popups ${JSON.stringify(record.toasts)}`);
          continue;
        }
        await waitReady(page, true);
        step(`${phase.name}: status ${await statusText(page)}`);
      }
      if (phase.command) { // run a command from the palette, e.g. "specd: Restart the Daemon Connection"
        await page.keyboard.press("Control+Shift+P");
        await page.waitForSelector(".quick-input-widget input", { state: "visible", timeout: 30000 });
        await page.locator(".quick-input-widget input").fill(`>${phase.command}`);
        await page.locator(".quick-input-list .monaco-list-row", { hasText: phase.command }).first()
          .waitFor({ timeout: 30000 });
        await page.keyboard.press("Enter");
        step(`${phase.name}: ran ${phase.command}`);
        await waitReady(page, true); // started again: ready, no latency yet
        step(`${phase.name}: status ${await statusText(page)}`);
      }
      if (phase.toggle) { // click the status bar item: `specd: Toggle Suggestions`
        await page.evaluate(() => {
          const item = [...document.querySelectorAll(".statusbar-item")]
            .find((e) => /(^|\.)specd\.status$/.test(e.id) || /^specd\b/.test((e.textContent || "").trim()));
          (item.querySelector("a") || item).click();
        });
        await page.waitForFunction(() => [...document.querySelectorAll(".statusbar-item")]
          .some((e) => /^specd/.test((e.textContent || "").trim()) && e.querySelector(".codicon-circle-slash")),
                                   null, { timeout: 30000 });
        step(`${phase.name}: suggestions off (${await statusText(page)})`);
      }
      const fileName = path.basename(phase.file);
      await page.keyboard.press("Control+P"); // Quick Open
      await page.waitForSelector(".quick-input-widget input", { state: "visible", timeout: 30000 });
      await page.locator(".quick-input-widget input").fill(fileName); // focused, whatever had focus before
      await page.locator(".quick-input-list .monaco-list-row", { hasText: fileName }).first()
        .waitFor({ timeout: 30000 });
      await page.keyboard.press("Enter");
      await page.waitForFunction((name) => [...document.querySelectorAll(".tab.active")]
        .some((t) => (t.getAttribute("aria-label") || t.textContent || "").includes(name)), fileName, { timeout: 30000 });
      await page.locator(".editor-instance .monaco-editor .view-lines").first().click();
      step(`${phase.name}: ${fileName} open`);
      await page.keyboard.press("Control+End");
      await page.waitForTimeout(300);
      record.before = fs.readFileSync(phase.file, "utf8") + phase.typed;
      await page.keyboard.insertText(phase.typed); // one edit: the suggestion is asked for once, here
      step(`${phase.name}: inserted ${JSON.stringify(phase.typed)}`);
      if (phase.toggle) { // off: no ghost text may come
        await page.waitForTimeout(phase.quietMs || 5000);
        record.ghost = await page.evaluate((sel) => [...document.querySelectorAll(sel)].map((e) => e.textContent), GHOST);
        record.status = await statusText(page);
        await page.keyboard.press("Control+S");
        await page.waitForFunction(() => !document.querySelector(".tab.active.dirty"), null, { timeout: 30000 });
        record.saved = fs.readFileSync(phase.file, "utf8");
        step(`${phase.name}: ghost text ${JSON.stringify(record.ghost)}; status ${record.status}`);
        continue;
      }
      await page.waitForSelector(GHOST, { timeout: LIMIT_MS });
      await page.waitForTimeout(400);
      record.ghost = await page.evaluate((sel) => [...document.querySelectorAll(sel)].map((e) => e.textContent), GHOST);
      await page.waitForFunction(() => [...document.querySelectorAll(".statusbar-item")]
        .some((e) => /^specd\b.* ms$/.test((e.textContent || "").trim())),
                                 null, { timeout: 10000 }).catch(() => {});
      record.status = await statusText(page);
      step(`${phase.name}: ghost text ${JSON.stringify(record.ghost)}; status ${record.status}`);
      await page.screenshot({ path: path.join(outDir, `${phase.name}.png`) });
      await page.keyboard.press("Tab");
      await page.waitForTimeout(300);
      await page.keyboard.press("Escape"); // a newer suggestion may show; the buffer is what counts
      await page.keyboard.press("Control+S");
      await page.waitForFunction(() => !document.querySelector(".tab.active.dirty"), null, { timeout: 30000 });
      record.saved = fs.readFileSync(phase.file, "utf8");
      record.toasts = await toasts(page);
      step(`${phase.name}: accepted and saved`);
    }
  } catch (e) {
    result.error = String((e && e.stack) || e);
    try {
      const pages = browser.contexts().flatMap((c) => c.pages());
      if (pages[0]) await pages[0].screenshot({ path: path.join(outDir, "failure.png") });
    } catch { /* the browser is gone */ }
  } finally {
    fs.writeFileSync(path.join(outDir, "result.json"), JSON.stringify(result, null, 2));
    await browser.close();
  }
  return result.error ? 1 : 0;
}

main().then((rc) => process.exit(rc), (e) => { console.error(e); process.exit(2); });

// A webhook endpoint's filter on the dashboard (docs/webhooks.md) in a
// real browser: Debian's chromium driven by playwright-core.
// browser_webhook_filters_test.go starts the stack, creates an endpoint
// subscribed to charge.created and runs this once; it prints one JSON line
// with what the journey saw, and leaves a screenshot of each step.
//
//   node webhook_filters.mjs CONFIG_JSON
//
// CONFIG_JSON: {api, email, password, shots, endpoint, checkpoints, bad,
// good}. The journey: sign in and open the endpoint; save the filter `bad`
// (refused on the page, next to the textarea, with what was typed); reload
// (nothing stored); save `good` and see it shown; then checkpoint "saved",
// where the test creates one charge the filter lets through and one it
// turns away; reload until the counts show them, list the filtered
// deliveries; empty the textarea and save. At a checkpoint the script GETs
// <checkpoints>/<name> and waits while the test checks or acts through the
// API; an answer other than 204 stops the journey with its text.
import { dashboardPage, launch, steps } from './harness.mjs';

const cfg = JSON.parse(process.argv[2]);
const out = { steps: {}, pageErrors: [], consoleErrors: [], refused: {}, saved: {}, counts: {}, log: {}, cleared: {} };
const { step, check, done } = steps(out);

const browser = await launch();
const { page, shot, expectError, failed } = await dashboardPage(browser, out, cfg.shots);

const endpoint = `${cfg.api}/dashboard/webhooks/${cfg.endpoint}`;
const save = '#edit-endpoint button[type=submit]';
const text = async (sel) => ((await page.textContent(sel)) || '').trim();

async function checkpoint(name) {
  const r = await fetch(`${cfg.checkpoints}/${name}`);
  check(r.status === 204, `checkpoint ${name}: ${r.status} ${await r.text()}`);
}

async function counts() {
  return {
    delivered: await text('#stats-delivered'), filtered: await text('#stats-filtered'),
    failed: await text('#stats-failed'), pending: await text('#stats-pending'),
  };
}

try {
  step('sign_in');
  await page.goto(`${cfg.api}/dashboard/login`);
  await page.fill('#email', cfg.email);
  await page.fill('#password', cfg.password);
  await Promise.all([page.waitForURL('**/dashboard/charges'), page.click('#login button[type=submit]')]);

  step('refused');
  await page.goto(endpoint);
  check(await page.inputValue('#edit-filter') === '', 'the new endpoint shows a filter');
  await page.fill('#edit-filter', cfg.bad);
  expectError(/status of 400/);
  const [refused] = await Promise.all([
    page.waitForResponse((r) => r.url() === endpoint && r.request().method() === 'POST'),
    page.click(save)]);
  await page.waitForSelector('#edit-filter-error');
  out.refused = {
    status: refused.status(),
    message: await text('#error strong'),
    fieldError: await text('#edit-filter-error'),
    kept: await page.inputValue('#edit-filter'),
    invalid: await page.getAttribute('#edit-filter', 'aria-invalid'),
  };
  await page.locator('#edit-endpoint').scrollIntoViewIfNeeded();
  await shot(page, 'webhook-filter-refused');
  await checkpoint('refused');
  await page.goto(endpoint);
  out.refused.afterReload = await page.inputValue('#edit-filter');

  step('saved');
  await page.fill('#edit-filter', cfg.good);
  await Promise.all([page.waitForURL('**notice=updated'), page.click(save)]);
  out.saved = {
    notice: await text('#notice'), shown: await page.inputValue('#edit-filter'),
    fits: await page.$eval('#edit-filter', (el) => el.scrollHeight <= el.clientHeight),
  };
  await shot(page, 'webhook-filter-saved');
  await checkpoint('saved');

  step('counted');
  // The test created the charges: reload until the counts show them.
  const deadline = Date.now() + 60000;
  out.counts.reloads = 0;
  for (;;) {
    await page.goto(endpoint).catch(() => {}); // the page may be reloading itself
    await page.waitForSelector('#endpoint-stats');
    Object.assign(out.counts, await counts());
    if (out.counts.delivered === '1' && out.counts.filtered === '1' && out.counts.pending === '0') { break; }
    check(Date.now() < deadline, `the counts stayed at ${JSON.stringify(out.counts)}`);
    out.counts.reloads++;
    await page.waitForTimeout(500);
  }

  step('log');
  await page.selectOption('#delivery-status', 'filtered');
  await Promise.all([page.waitForURL('**status=filtered'), page.click('form.filters button[type=submit]')]);
  out.log = {
    selected: await page.inputValue('#delivery-status'),
    deliveries: await page.$$eval('#deliveries article.delivery', (els) => els.map((a) => ({
      status: a.dataset.status,
      type: (a.querySelector('header strong') || { textContent: '' }).textContent.trim(),
      says: (a.querySelector('td.empty') || { textContent: '' }).textContent.trim(),
      attempts: a.querySelectorAll('tr.attempt').length,
    }))),
  };
  await page.locator('#endpoint-stats').scrollIntoViewIfNeeded();
  await shot(page, 'webhook-filter-log');

  step('cleared');
  await page.goto(endpoint);
  await page.fill('#edit-filter', '');
  await Promise.all([page.waitForURL('**notice=updated'), page.click(save)]);
  out.cleared = { notice: await text('#notice'), shown: await page.inputValue('#edit-filter') };
  step('done');
} catch (e) {
  await failed(e, 'webhook-filters');
} finally {
  await browser.close();
}
done();
console.log(JSON.stringify(out));

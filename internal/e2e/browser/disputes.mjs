// The dashboard's disputes (docs/disputes.md, "The dashboard") in a real
// browser: Debian's chromium driven by playwright-core.
// browser_disputes_test.go starts the stack, captures payments of the
// sandbox's disputed test cards and runs this once; it prints one JSON line
// with what the journey saw, and leaves a screenshot of each page.
//
//   node disputes.mjs CONFIG_JSON
//
// CONFIG_JSON: {api, email, password, shots, dispute}. The journey: sign
// in; open Money, then Disputes, and read the list; open the dispute named
// `dispute`; stage evidence with an IP address that is not one (refused on
// the page, next to its field), correct it and save; submit the sandbox's
// winning test evidence; see the page read-only, and the dispute won once
// the sandbox decides it; read the list again.
import { dashboardPage, launch, steps } from './harness.mjs';

const cfg = JSON.parse(process.argv[2]);
const out = { steps: {}, pageErrors: [], consoleErrors: [], refused: {}, saved: {}, submitted: {}, decided: {} };
const { step, check, done } = steps(out);

const browser = await launch();
const { page, shot, expectError, failed } = await dashboardPage(browser, out, cfg.shots);
// The submit button asks first: the journey says yes.
page.on('dialog', (d) => d.accept());

// listed reads the rows of the Disputes page.
const listed = () => page.$$eval('#disputes tbody tr[data-dispute]', (rows) => rows.map((r) => ({
  id: r.dataset.dispute, status: r.dataset.status, group: r.dataset.group, soon: r.dataset.soon,
  left: (r.querySelector('[data-left]') || { textContent: '' }).textContent.trim(),
})));

const dispute = `${cfg.api}/dashboard/disputes/${cfg.dispute}`;

try {
  step('sign_in');
  await page.goto(`${cfg.api}/dashboard/login`);
  await page.fill('#email', cfg.email);
  await page.fill('#password', cfg.password);
  await Promise.all([page.waitForURL('**/dashboard/charges'), page.click('#login button[type=submit]')]);

  step('list');
  await Promise.all([page.waitForURL('**/dashboard/balance'), page.click('nav[aria-label=Sections] a[href="/dashboard/balance"]')]);
  out.moneyLinks = await page.$$eval('nav[aria-label=Money] a', (els) => els.map((a) => a.getAttribute('href')));
  await Promise.all([page.waitForURL('**/dashboard/disputes'), page.click('nav[aria-label=Money] a[href="/dashboard/disputes"]')]);
  out.listed = await listed();
  check(out.listed.some((r) => r.id === cfg.dispute), `the list does not show ${cfg.dispute}`);

  step('refused');
  await Promise.all([page.waitForURL(`**/dashboard/disputes/${cfg.dispute}`), page.click(`#disputes tr[data-dispute="${cfg.dispute}"] td.num a`)]);
  check(await page.isVisible('#submit-evidence'), 'the owner has no submit button');
  await page.fill('#evidence-customer_name', 'Jenny Rosen');
  await page.fill('#evidence-customer_email_address', 'jenny.rosen@example.com');
  await page.fill('#evidence-customer_purchase_ip', '300.1.2.3');
  await page.fill('#evidence-product_description', 'A hand-thrown stoneware mug, glazed blue.\nShipped in a padded box.');
  await page.fill('#evidence-shipping_carrier', 'Royal Mail');
  await page.fill('#evidence-shipping_tracking_number', 'RM123456789GB');
  await page.fill('#evidence-shipping_date', '2026-11-20');
  await page.fill('#evidence-shipping_address', 'Jenny Rosen\n1 Test Street\nLondon N1 1AA');
  expectError(/status of 400/);
  const [refused] = await Promise.all([
    page.waitForResponse((r) => r.url() === dispute && r.request().method() === 'POST'),
    page.click('#save-evidence')]);
  await page.waitForSelector('#evidence-customer_purchase_ip-error');
  out.refused = {
    status: refused.status(),
    message: (await page.textContent('#error strong')).trim(),
    fieldError: (await page.textContent('#evidence-customer_purchase_ip-error')).trim(),
    kept: await page.inputValue('#evidence-customer_purchase_ip'),
  };
  check(await page.inputValue('#evidence-shipping_carrier') === 'Royal Mail', 'the refused form lost what was typed');
  await page.locator('[data-field="customer_purchase_ip"]').scrollIntoViewIfNeeded();
  await shot(page, 'dispute-refused');

  step('saved');
  await page.fill('#evidence-customer_purchase_ip', '203.0.113.7');
  await Promise.all([page.waitForURL('**notice=evidence_saved'), page.click('#save-evidence')]);
  out.saved = {
    notice: (await page.textContent('#notice')).trim(),
    chars: (await page.textContent('#evidence-chars')).trim(),
    kept: await page.inputValue('#evidence-customer_purchase_ip'),
  };
  await shot(page, 'dispute');

  step('submitted');
  await page.fill('#evidence-uncategorized_text', 'winning_evidence');
  await Promise.all([page.waitForURL('**notice=evidence_sent'), page.click('#submit-evidence')]);
  out.submitted = {
    notice: (await page.textContent('#notice')).trim(),
    forms: await page.locator('#evidence-form, #close-form').count(),
    shown: ((await page.textContent('#evidence-list [data-field="uncategorized_text"]')) || '').trim(),
  };

  step('decided');
  // The page reloads itself while the provider decides.
  await page.waitForSelector('#dispute-status[data-status="won"]', { timeout: 60000 });
  out.decided = {
    status: await page.getAttribute('#dispute-status', 'data-status'),
    funds: (await page.textContent('#dispute-funds')).trim(),
  };
  await shot(page, 'dispute-won');

  step('after');
  await Promise.all([page.waitForURL('**/dashboard/disputes'), page.click('nav[aria-label=Money] a[href="/dashboard/disputes"]')]);
  out.after = await listed();
  await shot(page, 'disputes');
  step('done');
} catch (e) {
  await failed(e, 'disputes');
} finally {
  await browser.close();
}
done();
console.log(JSON.stringify(out));

// Verifies Gatehouse's webhook signature vectors with libraries written by
// others: @octokit/webhooks-methods for X-Service-Signature (sha256=<hex>) and
// standardwebhooks for the webhook-id / webhook-timestamp / webhook-signature
// trio. Run by internal/webhooks/signature_test.go:
//
//   node verify.mjs <vectors.json> <clock>
//
// <clock> is "vector" to check each vector as if now were its timestamp
// (standardwebhooks refuses timestamps more than 5 minutes from now), or
// "real" to keep the real clock (for vectors made during the test run).
// Prints one JSON object per check: {"vector", "check", "ok", "detail"}.
import { readFileSync } from "node:fs";
import { sign as octokitSign, verify as octokitVerify } from "@octokit/webhooks-methods";
import { Webhook } from "standardwebhooks";

const [file, clock] = process.argv.slice(2);
if (!file || (clock !== "vector" && clock !== "real")) {
  console.error("usage: node verify.mjs <vectors.json> vector|real");
  process.exit(2);
}

const { vectors } = JSON.parse(readFileSync(file, "utf8"));
const realNow = Date.now;

function report(vector, check, ok, detail = "") {
  console.log(JSON.stringify({ vector: vector.name, check, ok, detail }));
}

// standardVerify returns "" when the headers verify, else the library's reason.
function standardVerify(secret, body, headers) {
  try {
    new Webhook(secret).verify(body, {
      "webhook-id": headers["webhook-id"],
      "webhook-timestamp": headers["webhook-timestamp"],
      "webhook-signature": headers["webhook-signature"],
    }, { jsonParse: false });
    return "";
  } catch (e) {
    return String(e && e.message ? e.message : e);
  }
}

for (const v of vectors) {
  const h = v.headers;
  const tampered = v.body + " ";

  // @octokit/webhooks-methods: the key is the whole whsec_ string.
  report(v, "octokit verify current", await octokitVerify(v.secret, v.body, h["X-Service-Signature"]));
  const signed = await octokitSign(v.secret, v.body);
  report(v, "octokit sign equals header", signed === h["X-Service-Signature"], signed);
  report(v, "octokit rejects tampered body", !(await octokitVerify(v.secret, tampered, h["X-Service-Signature"])));
  if (v.previous_secret) {
    report(v, "octokit verify previous", await octokitVerify(v.previous_secret, v.body, h["X-Service-Signature-Previous"]));
    report(v, "octokit previous secret does not verify current header",
      !(await octokitVerify(v.previous_secret, v.body, h["X-Service-Signature"])));
  }

  // standardwebhooks: the key is the base64-decoded part after whsec_.
  Date.now = clock === "vector" ? () => Number(h["webhook-timestamp"]) * 1000 : realNow;
  try {
    let why = standardVerify(v.secret, v.body, h);
    report(v, "standardwebhooks verify current", why === "", why);
    const first = h["webhook-signature"].split(" ")[0];
    const own = new Webhook(v.secret).sign(h["webhook-id"], new Date(Number(h["webhook-timestamp"]) * 1000), v.body);
    report(v, "standardwebhooks sign equals first signature", own === first, own);
    why = standardVerify(v.secret, tampered, h);
    report(v, "standardwebhooks rejects tampered body", why !== "", why);
    if (v.previous_secret) {
      why = standardVerify(v.previous_secret, v.body, h);
      report(v, "standardwebhooks verify previous", why === "", why);
    }
  } finally {
    Date.now = realNow;
  }
}

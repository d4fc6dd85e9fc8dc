// A webhook receiver that verifies every request with libraries written by
// others, as a merchant's server would: @octokit/webhooks-methods for
// X-Service-Signature and standardwebhooks for webhook-signature. Run by
// internal/e2e/cli_test.go:
//
//   node receive.mjs <whsec_ secret> <port | fd:N>
//
// It listens on the port on 127.0.0.1, or serves on the listening socket it
// inherited as file descriptor N (the test binds it on port 0, so that no
// other process can take the port first).
// Prints {"port"} once listening, then one JSON line per request:
// {"event_id", "event_type", "sequence", "octokit", "standard", "detail", "at_ms", "body"}.
// Answers 200 when both signatures verify, 400 otherwise.
import { createServer } from "node:http";
import { verify as octokitVerify } from "@octokit/webhooks-methods";
import { Webhook } from "standardwebhooks";

const [secret, where] = process.argv.slice(2);
if (!secret || !secret.startsWith("whsec_") || !where) {
  console.error("usage: node receive.mjs whsec_... <port | fd:N>");
  process.exit(2);
}

const server = createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", async () => {
    const at = Date.now();
    const body = Buffer.concat(chunks).toString("utf8");
    const h = req.headers;
    let octokit = false;
    let standard = false;
    let detail = "";
    try {
      octokit = await octokitVerify(secret, body, h["x-service-signature"]);
    } catch (e) {
      detail += "octokit: " + e.message + "; ";
    }
    try {
      new Webhook(secret).verify(body, {
        "webhook-id": h["webhook-id"],
        "webhook-timestamp": h["webhook-timestamp"],
        "webhook-signature": h["webhook-signature"],
      }, { jsonParse: false });
      standard = true;
    } catch (e) {
      detail += "standardwebhooks: " + e.message;
    }
    console.log(JSON.stringify({
      event_id: h["x-service-event-id"], event_type: h["x-service-event-type"], sequence: h["x-service-sequence"] || "",
      octokit, standard, detail, at_ms: at, body,
    }));
    res.writeHead(octokit && standard ? 200 : 400);
    res.end();
  });
});
const listening = () => console.log(JSON.stringify({ port: server.address().port }));
if (where.startsWith("fd:")) {
  server.listen({ fd: Number(where.slice(3)) }, listening);
} else {
  server.listen(Number(where), "127.0.0.1", listening);
}

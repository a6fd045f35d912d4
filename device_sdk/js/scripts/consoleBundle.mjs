// The analyst console's log verifier: src/logAudit.ts (on src/translog.ts) as one ES module, vendored into
// analytics_server/console/vendor/translog.js so the server serves it without Node (`node scripts/bundle.mjs --vendor`
// writes it; test/console_vendor.test.ts fails while the committed file differs from a fresh build).
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const JS_DIR = join(dirname(fileURLToPath(import.meta.url)), "..");

export const VENDORED = join(JS_DIR, "..", "..", "analytics_server", "console", "vendor", "translog.js");

/** esbuild options of the console bundle (`write: false` gives its bytes, `outfile: VENDORED` writes it). */
export const CONSOLE_BUNDLE = {
  absWorkingDir: JS_DIR,
  entryPoints: ["src/logAudit.ts"],
  bundle: true,
  minify: false,
  format: "esm",
  platform: "browser",
  target: ["es2022"],
  legalComments: "eof",
  charset: "utf8",
  banner: { js: "// Generated from device_sdk/js/src/logAudit.ts and translog.ts by `node scripts/bundle.mjs --vendor`: do not edit." },
  logLevel: "warning",
};

// The minified ESM bundle for browsers (dist/fa-device-sdk.min.js) from the compiled module tree, with esbuild;
// with --vendor also the analyst console's log verifier (scripts/consoleBundle.mjs).
import { build } from "esbuild";

import { CONSOLE_BUNDLE, VENDORED } from "./consoleBundle.mjs";

await build({
  entryPoints: ["dist/src/index.js"],
  bundle: true,
  minify: true,
  format: "esm",
  platform: "browser",
  target: ["es2022"],
  outfile: "dist/fa-device-sdk.min.js",
  legalComments: "eof",
  logLevel: "warning",
});

if (process.argv.includes("--vendor")) await build({ ...CONSOLE_BUNDLE, outfile: VENDORED });

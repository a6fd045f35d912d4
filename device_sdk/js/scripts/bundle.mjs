// The minified ESM bundle for browsers (dist/fa-device-sdk.min.js) from the compiled module tree, with esbuild.
import { build } from "esbuild";

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

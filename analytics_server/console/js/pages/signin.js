import { signIn } from "../api.js";
import { h } from "../dom.js";

export async function render({ main }) {
  const input = h("input", { type: "password", id: "token", name: "token", autocomplete: "off", required: true,
    placeholder: "fa_…", "aria-describedby": "token-help" });
  const error = h("p", { class: "error", role: "alert", hidden: true, "data-testid": "signin-error" });
  const form = h("form", { class: "card signin", onsubmit: async (ev) => {
    ev.preventDefault();
    error.hidden = true;
    try {
      await signIn(input.value);
      location.hash = "#/queries";
    } catch (err) {
      error.textContent = err.status === 401 ? "This token is unknown or revoked." : err.message;
      error.hidden = false;
    }
  } },
  h("h1", {}, "Sign in"),
  h("label", { for: "token" }, "Bearer token"),
  input,
  h("p", { id: "token-help", class: "muted" },
    "An analyst or admin token (`fa-server token create --role analyst`). It is kept in this browser tab only " +
    "(session storage) and sent to this server alone; closing the tab forgets it."),
  error,
  h("button", { type: "submit", class: "primary" }, "Sign in"));
  main.append(form);
  input.focus();
}

/**
 * The rent page's DOM hooks (the stable contract with its browser test): figures in
 * `[data-field]` (text for people, `data-raw` the exact value), panels by `[data-role]`,
 * buttons by `[data-action]`. Text is only ever set with textContent.
 */

export function el<T extends HTMLElement = HTMLElement>(selector: string): T {
  const found = document.querySelector<T>(selector);
  if (!found) throw new Error(`the page lacks ${selector}`);
  return found;
}

export function field(name: string): HTMLElement {
  return el(`[data-field="${name}"]`);
}

/** Shows `text` in `[data-field=name]`, its exact value in `data-raw`. */
export function setField(name: string, text: string, raw: string | number | bigint | null = null): void {
  const f = field(name);
  f.textContent = text;
  f.dataset.raw = raw === null ? "" : String(raw);
}

export function show(role: string, visible: boolean): void {
  el(`[data-role="${role}"]`).hidden = !visible;
}

/** The current step, or "" when idle. */
export function status(text: string): void {
  el('[data-role="status"]').textContent = text;
}

/** The error banner: what happened and what to do; hidden and empty when `message` is "". */
export function error(message: string): void {
  const banner = el('[data-role="error"]');
  banner.textContent = message;
  banner.hidden = message === "";
}

/** Disables every button and input of the flow while `busy` (one action at a time). */
export function busy(on: boolean): void {
  document.body.classList.toggle("busy", on);
  for (const b of document.querySelectorAll<HTMLButtonElement>("button[data-action]")) {
    if (on) {
      b.dataset.wasDisabled = b.disabled ? "1" : "";
      b.disabled = true;
    } else if (b.dataset.wasDisabled !== undefined) {
      b.disabled = b.dataset.wasDisabled === "1";
      delete b.dataset.wasDisabled;
    }
  }
}

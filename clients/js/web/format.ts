/**
 * Pure helpers of the rent page: token amounts (base units <-> tokens, exact with bigint),
 * hours, durations and dates as a person reads them, a POSIX-shell-like split of the command
 * line and the ports list. Nothing here touches the DOM or the network.
 */
import type { PortSpec } from "../src/workload";

const group = (digits: string): string => digits.replace(/\B(?=(\d{3})+(?!\d))/g, ",");

/** `base` units of a `decimals`-decimal mint as tokens: "1,234.5" (exact, no float). */
export function tokens(base: bigint, decimals: number): string {
  const neg = base < 0n;
  const s = (neg ? -base : base).toString().padStart(decimals + 1, "0");
  const whole = group(s.slice(0, s.length - decimals));
  const frac = decimals ? s.slice(s.length - decimals).replace(/0+$/, "") : "";
  return (neg ? "-" : "") + whole + (frac ? `.${frac}` : "");
}

/** A decimal number of tokens ("2.5") in base units; RangeError naming `what` otherwise. */
export function parseTokens(text: string, decimals: number, what: string): bigint {
  const t = text.trim().replace(/,/g, "");
  const m = /^(\d+)(?:\.(\d*))?$/.exec(t);
  if (!m) throw new RangeError(`${what}: "${text}" is not a number of tokens, e.g. 2.5`);
  const frac = m[2] ?? "";
  if (frac.length > decimals) throw new RangeError(`${what}: at most ${decimals} decimals`);
  return BigInt(m[1] + frac.padEnd(decimals, "0"));
}

/** Millionths of an hour in a decimal number of hours ("1.5" -> 1_500_000n); RangeError
 * for anything but a positive number with at most 6 decimals. */
export function parseHours(text: string, what = "hours"): bigint {
  const m = /^(\d+)(?:\.(\d{0,6}))?$/.exec(text.trim());
  if (!m) throw new RangeError(`${what}: give a positive number of hours, e.g. 2 or 0.5`);
  const micro = BigInt(m[1] + (m[2] ?? "").padEnd(6, "0"));
  if (micro <= 0n) throw new RangeError(`${what}: give a positive number of hours, e.g. 2 or 0.5`);
  return micro;
}

/** ceil(rate per second x hours given in millionths of an hour). */
export function costOf(ratePerSecond: bigint, microHours: bigint): bigint {
  const num = ratePerSecond * microHours * 3600n;
  return (num + 999_999n) / 1_000_000n;
}

/** Seconds as "2 h 05 min", "45 s", "3 d 4 h". */
export function duration(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  if (d) return `${d} d ${h} h`;
  if (h) return `${h} h ${String(m).padStart(2, "0")} min`;
  if (m) return `${m} min ${s % 60} s`;
  return `${s} s`;
}

/** Unix seconds as a local date and time ("27 Nov 2026, 18:44"); "—" for 0 or null. */
export function date(unix: number | bigint | null | undefined): string {
  if (unix === null || unix === undefined || Number(unix) === 0) return "—";
  return new Date(Number(unix) * 1000).toLocaleString(undefined, {
    day: "numeric", month: "short", year: "numeric", hour: "2-digit", minute: "2-digit",
  });
}

/** A command line split into words as a POSIX shell would (quotes, backslashes; no
 * expansion); RangeError for an unclosed quote. */
export function shellSplit(line: string): string[] {
  const words: string[] = [];
  let word = "";
  let inWord = false;
  let quote: "'" | '"' | null = null;
  for (let i = 0; i < line.length; i++) {
    const c = line.charAt(i);
    if (quote === "'") {
      if (c === "'") quote = null;
      else word += c;
    } else if (quote === '"') {
      if (c === '"') quote = null;
      else if (c === "\\" && i + 1 < line.length && '"\\$`'.includes(line.charAt(i + 1))) word += line.charAt(++i);
      else word += c;
    } else if (c === "'" || c === '"') {
      quote = c;
      inWord = true;
    } else if (c === "\\") {
      if (i + 1 < line.length) word += line.charAt(++i);
      inWord = true;
    } else if (/\s/.test(c)) {
      if (inWord) words.push(word);
      word = "";
      inWord = false;
    } else {
      word += c;
      inWord = true;
    }
  }
  if (quote) throw new RangeError(`command: the ${quote === "'" ? "single" : "double"} quote is not closed`);
  if (inWord) words.push(word);
  return words;
}

/** "8888, 53/udp" -> [{port: 8888}, {port: 53, protocol: "udp"}]; RangeError otherwise. */
export function parsePorts(text: string): PortSpec[] {
  const out: PortSpec[] = [];
  for (const item of text.split(",").map((s) => s.trim()).filter(Boolean)) {
    const m = /^(\d{1,5})(?:\/(tcp|udp))?$/i.exec(item);
    const port = m ? Number(m[1]) : 0;
    if (!m || port < 1 || port > 65535) throw new RangeError(`ports: "${item}" is not a port 1..65535 (optionally /tcp or /udp)`);
    out.push(m[2] ? { port, protocol: m[2].toLowerCase() as "tcp" | "udp" } : { port });
  }
  return out;
}

/** "KEY=value" lines (blank lines skipped) as a map; RangeError naming the bad line. */
export function parseEnvLines(text: string, what: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (!line) continue;
    const at = line.indexOf("=");
    if (at <= 0) throw new RangeError(`${what}: "${line.slice(0, 40)}" is not KEY=value`);
    out[line.slice(0, at)] = line.slice(at + 1);
  }
  return out;
}

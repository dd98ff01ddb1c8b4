// Generates the typed client (src/generated) from the committed IDL with Codama.
//
// Usage: node scripts/generate.mjs [OUT_DIR]   (default src/generated; `make js-client` runs it,
// `make js-client-check` renders into a temporary folder and diffs it with the committed code).
// The output depends only on idl/gpu_market.json and the pinned Codama packages.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import {
  accountValueNode,
  createFromRoot,
  deleteNodesVisitor,
  pdaLinkNode,
  pdaSeedValueNode,
  pdaValueNode,
  updateInstructionsVisitor,
} from "codama";
import { rootNodeFromAnchor } from "@codama/nodes-from-anchor";
import { renderVisitor } from "@codama/renderers-js";

const packageFolder = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const idlPath = path.resolve(packageFolder, "../../idl/gpu_market.json");
const outDir = path.resolve(process.argv[2] ?? path.join(packageFolder, "src/generated"));

const idl = JSON.parse(fs.readFileSync(idlPath, "utf8"));
const codama = createFromRoot(rootNodeFromAnchor(idl));
// One Validator PDA helper: settle names the validator's authority `validator_authority`, so
// Codama would derive a second, identical PDA (`settleValidator`) from it.
codama.update(
  updateInstructionsVisitor({
    settle: {
      accounts: {
        validator: {
          defaultValue: pdaValueNode(pdaLinkNode("validator"), [
            pdaSeedValueNode("market", accountValueNode("market")),
            pdaSeedValueNode("authority", accountValueNode("validatorAuthority")),
          ]),
        },
      },
    },
  }),
);
codama.update(deleteNodesVisitor(["[pdaNode]settleValidator"]));
await codama.accept(
  renderVisitor(packageFolder, {
    generatedFolder: path.relative(packageFolder, outDir),
    deleteFolderBeforeRendering: true,
    // package.json is ours (pinned versions); Codama only checks it names what the code imports.
    syncPackageJson: false,
  }),
);

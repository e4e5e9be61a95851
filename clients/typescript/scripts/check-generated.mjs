// npm run check-generated: regenerate the API types to a temporary file and fail when the
// committed src/schema.ts differs (run `npm run generate` after docs/openapi.json changes).
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SCHEMA_TS, generate } from "./schema.mjs";

const dir = await mkdtemp(join(tmpdir(), "lectern-schema-"));
try {
  const fresh = join(dir, "schema.ts");
  await writeFile(fresh, await generate());
  const [committed, regenerated] = await Promise.all([
    readFile(SCHEMA_TS, "utf8").catch(() => null),
    readFile(fresh, "utf8"),
  ]);
  if (committed !== regenerated) {
    const why = committed === null ? "is missing" : "differs from docs/openapi.json";
    console.error(`src/schema.ts ${why}: run \`npm run generate\` in clients/typescript`);
    process.exit(1);
  }
  console.log("src/schema.ts is up to date with docs/openapi.json");
} finally {
  await rm(dir, { recursive: true, force: true });
}

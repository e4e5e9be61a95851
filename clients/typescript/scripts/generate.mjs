// npm run generate: write src/schema.ts from docs/openapi.json.
import { writeFile } from "node:fs/promises";
import { SCHEMA_TS, generate } from "./schema.mjs";

await writeFile(SCHEMA_TS, await generate());
console.log(`wrote ${SCHEMA_TS}`);

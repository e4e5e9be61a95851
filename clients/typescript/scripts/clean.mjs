// Remove dist/ before a build, so no file of a deleted source lingers.
import { rm } from "node:fs/promises";

await rm(new URL("../dist/", import.meta.url), { recursive: true, force: true });

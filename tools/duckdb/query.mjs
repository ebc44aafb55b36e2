// Runs each SQL statement given as an argument in one in-memory DuckDB
// and prints each one's result as a JSON array of row objects, one line
// per statement (replay/duckdb_test.go; docs/replay.md). Installed with
// `npm ci --prefix tools/duckdb` (scripts/prepare.sh does it).
import { DuckDBInstance } from '@duckdb/node-api';

const instance = await DuckDBInstance.create(':memory:');
const conn = await instance.connect();
for (const sql of process.argv.slice(2)) {
  const reader = await conn.runAndReadAll(sql);
  console.log(JSON.stringify(reader.getRowObjectsJson()));
}

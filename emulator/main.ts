// Standalone emulator: `tsx emulator/main.ts [port]` (default 8790). `npm run dev` starts its own
// in-process on PORT+1.
import { startLarkEmulator } from './server';

const port = Number(process.argv[2] ?? process.env.LARK_EMULATOR_PORT ?? 8790);
const emu = await startLarkEmulator({ port });
console.log(`lark emulator listening on ${emu.url}`);
const stop = () => void emu.close().then(() => process.exit(0));
process.on('SIGINT', stop);
process.on('SIGTERM', stop);

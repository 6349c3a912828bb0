-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- squawk-ignore-file prefer-bigint-over-int -- a credential version counter, not an id
-- Lark installations: one self-built app in one workspace. Secrets are sealed with
-- workers/crypto/sealed.ts, bound to `lark_installation:<id>:<field>`, so a ciphertext
-- copied onto another row or field does not open.
create table lark_installations (
  id text primary key,
  workspace_id text not null,
  app_id text not null,
  api_base text not null,
  app_secret_sealed text not null,
  verification_token_sealed text not null,
  encrypt_key_sealed text,
  credential_version integer not null default 1,
  created_at timestamptz not null default app_now(),
  updated_at timestamptz not null default app_now()
);

create unique index lark_installations_workspace_app on lark_installations (workspace_id, app_id);

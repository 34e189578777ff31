// The component's entry: the `rules` policy exported as the contract's `decider`. Its
// name, version and description are the Rust `rules` crate's, so both builds describe
// themselves alike (a test keeps them in step with package.json and Cargo.toml).

import { exportPolicy } from '@verdict/sdk';

import { Rules } from './rules.js';

export const decider = exportPolicy(Rules, {
  name: 'rules',
  version: '0.1.0',
  description: 'Table-driven retry and dead-letter rules by error kind (the standard error-type table by default).',
});

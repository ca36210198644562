//go:build race

package layer0_test

import "time"

// refusalBudget bounds how long the gateway may take to refuse a 30 MB request: the race
// detector slows reading and decoding the body several times over.
const refusalBudget = 30 * time.Second

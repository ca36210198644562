//go:build race

package e2e

import "time"

// refusalBudget bounds how long the gateway may take to refuse a 30 MB request: the race
// detector slows reading and decoding the body several times over.
const refusalBudget = 30 * time.Second

// placementTimed says whether the placement benchmark's timing-dependent bounds hold: under the
// race detector every request is several times slower and the load the picker weighs is not
// the load of a real pool, so only the comparison with p2c is asserted there.
const placementTimed = false

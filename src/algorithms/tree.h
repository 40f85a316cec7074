// Binary trees over ranks, NCCL's layout: in a tree of n ranks numbered 0..n-1, rank v's
// parent clears v's lowest set bit and sets the next one up, so every rank is at most
// log2(n) levels from the root and half the ranks are leaves.
//
//   n = 8:        0
//                 |
//                 4
//              /     \     .
//             2       6
//            / \     / \   .
//           1   3   5   7
//
// The double binary tree gives every rank two roles: the second tree is the first mirrored
// (n even) or shifted by one (n odd), so a leaf of one tree is an inner node of the other and
// both halves of the data keep every link busy.
//
// Across hosts (NCCL's layout): the double binary tree joins the hosts, and within a host the
// ranks form a chain from the host's head, the first rank of the host in tree 0 and the last
// in tree 1, so the two trees leave and enter each host through different ranks (and NICs).
// A head has up to three children: the next in its chain and two hosts' heads. Every tree
// edge but H-1 stays inside a host.
//
//   2 hosts of 3 ranks, tree 0:   0 -> 1 -> 2        (host A: positions 0 1 2)
//                                 |
//                                 3 -> 4 -> 5        (host B)
#pragma once

#include <string>
#include <vector>

#include "algorithms/algorithm.h"

namespace loom {

struct TreeNode {
  int parent = -1;  // -1 at the root
  int children[3] = {-1, -1, -1};
  bool isLeaf() const { return children[0] < 0 && children[1] < 0 && children[2] < 0; }
};

// Rank v's place in the binary tree over 0..n-1 rooted at 0.
TreeNode binaryTree(int n, int v);
// Rank r's place in tree t (0 or 1) of the double binary tree over n ranks.
TreeNode doubleTree(int n, int r, int t);
// Rank r's place in the binary tree rooted at `root` (ranks renumbered from root).
TreeNode rootedTree(int n, int r, int root);
// Position p's place in tree t of the double tree across hosts, where host h holds positions
// [hostStarts[h], hostStarts[h+1]) (hostStarts[0] == 0, ascending).
TreeNode hostDoubleTree(const std::vector<int>& hostStarts, int n, int p, int t);

// The two trees tree allreduce builds over n ranks in `order` (nullptr: rank order), as
// "tree 0 (rank:parent): 0:root 1:0 ...; tree 1 (rank:parent): ...", for logs and loom-topo.
std::string describeAllReduceTrees(const RingOrder* order, int n);

}  // namespace loom
